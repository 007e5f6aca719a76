"""Uploads named as the user named them, referred to by id, previewed before Run (core/inputs/uploads.py)."""

import pandas as pd
import pytest

from core.base.errors import InputError
from core.inputs import uploads as U


def _csv(rows=30, text=True) -> bytes:
    df = pd.DataFrame({"id": range(rows), "score": [i * 0.5 for i in range(rows)],
                       "body": [f"Document {i} is about rivers and the sea near the mountains." for i in range(rows)]})
    return df.to_csv(index=False).encode()


def test_an_upload_keeps_its_name_and_is_found_by_id(tmp_path):
    path = U.save_upload(_csv(), "my-corpus.csv", tmp_path)
    uid = U.upload_id(path)
    assert U.is_upload_id(uid) and uid == "upload:" + path.name and str(tmp_path) not in uid
    assert U.resolve(uid, tmp_path) == path
    assert U.display_name(uid, None, tmp_path) == "my-corpus.csv"
    assert U.display_name(uid, "body", tmp_path) == "my-corpus.csv [body]"
    assert U.display_name(path.name, "body", tmp_path) == "my-corpus.csv [body]"  # as the manifest stores it
    assert U.display_name("wiki-en") == "wiki-en"


def test_rename_per_column_and_restore(tmp_path):
    uid = U.upload_id(U.save_upload(_csv(), "my-corpus.csv", tmp_path))
    assert U.rename(uid, "reviews (en)", "body", tmp_path) == "reviews (en)"
    assert U.display_name(uid, "id", tmp_path) == "my-corpus.csv [id]"  # the other column keeps the file's name
    assert U.rename(uid, "  ", "body", tmp_path) == "my-corpus.csv [body]"


def test_names_are_cleaned_and_ids_checked(tmp_path):
    path = U.save_upload(b"a b c\n\nd e f", "../../evil\u202e<b>x</b>.txt", tmp_path)
    name = U.display_name(U.upload_id(path), None, tmp_path)
    assert "/" not in name and "\u202e" not in name and name.endswith(".txt")
    with pytest.raises(InputError, match="Not an upload id"):
        U.resolve("upload:../../etc/passwd", tmp_path)
    with pytest.raises(InputError, match="not on this server"):
        U.resolve("upload:" + "0" * 64 + ".txt", tmp_path)
    assert U.slug("my-corpus.csv [body]") == "my-corpus.csv_body"


def test_preview_of_a_table_detects_the_text_column(tmp_path):
    uid = U.upload_id(U.save_upload(_csv(40), "my-corpus.csv", tmp_path))
    pv = U.preview(uid, None, tmp_path)
    assert pv.kind == "table" and pv.detected_column == "body" and pv.text_column == "body"
    assert pv.n_documents == 40 and pv.first[0].startswith("Document 0")
    assert pv.est_tokens == round(pv.n_words * U.TOKENS_PER_WORD) and pv.est_tokens > 400
    assert not any("numbers" in w for w in pv.warnings)


def test_preview_warns_on_degenerate_input(tmp_path):
    uid = U.upload_id(U.save_upload(_csv(40), "my-corpus.csv", tmp_path))
    nums = U.preview(uid, "score", tmp_path)
    assert any("numbers only" in w for w in nums.warnings)
    tiny = U.preview(U.upload_id(U.save_pasted_text("four tiny words here", tmp_path)), None, tmp_path)
    assert tiny.name.startswith("pasted: four tiny words here")
    assert any("Only about" in w for w in tiny.warnings) and any("One document" in w for w in tiny.warnings)
    with pytest.raises(InputError, match="empty"):
        U.save_pasted_text(" \n\t ", tmp_path)


def test_several_files_become_one_zip_whatever_their_order(tmp_path):
    import io
    import zipfile

    from core.inputs.modalities import corpus_modality

    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as z:
        z.writestr("sub/c.wav", b"RIFF-c")
        z.writestr("notes.txt", b"not a recording")
    files = [("b.flac", b"fLaC-b"), ("a.wav", b"RIFF-a"), ("more.zip", inner.getvalue()), ("readme.md", b"x")]
    one = U.bundle_files(files, (".wav", ".flac"))
    assert one == U.bundle_files(list(reversed(files)), (".wav", ".flac"))  # same files, same bytes, same id
    with zipfile.ZipFile(io.BytesIO(one)) as z:
        assert z.namelist() == ["a.wav", "b.flac", "more/sub/c.wav"]
        assert z.read("more/sub/c.wav") == b"RIFF-c"
    path = U.save_upload(one, "3 recordings.zip", tmp_path)
    assert corpus_modality(str(path)) == "audio"
    with pytest.raises(InputError, match="None of the 1 files"):
        U.bundle_files([("readme.md", b"x")], (".png",))
    with pytest.raises(InputError, match="not a valid zip"):
        U.bundle_files([("bad.zip", b"PK no")], (".png",))


# ----------------------------------------------------------------------------- issue 27 item 5: bombs
def _zip_bomb(declared_mb: int, extra: tuple = ()) -> bytes:
    """A small zip whose one PNG-named member unpacks to `declared_mb` MiB of zeros (written in pieces)."""
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        for name, data in extra:
            z.writestr(name, data)
        with z.open("bomb.png", "w", force_zip64=True) as f:
            chunk = bytes(2**20)
            for _ in range(declared_mb):
                f.write(chunk)
    return out.getvalue()


def png_header_only(w: int, h: int) -> bytes:
    """A valid 1-bit PNG of w x h pixels, a few hundred KB at most: rows of zeros compressed in a stream."""
    import struct
    import zlib

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    row, c = b"\x00" + bytes((w + 7) // 8), zlib.compressobj(9)
    body = b"".join(c.compress(row) for _ in range(h)) + c.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", body) + chunk(b"IEND", b""))


def test_a_zip_bomb_is_refused_from_its_declared_sizes(tmp_path, monkeypatch):
    from core.inputs.modalities import load_pictures

    bomb = _zip_bomb(64)
    assert len(bomb) < 200_000  # 64 MiB of zeros in well under 200 KB
    monkeypatch.setenv("ANISO_MAX_UNPACKED_MB", "16")
    import zipfile

    real_read = zipfile.ZipFile.read
    monkeypatch.setattr(zipfile.ZipFile, "read", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
    with pytest.raises(InputError, match=r"unpacks to 64 MiB, more than the limit of 16 MiB.*ANISO_MAX_UNPACKED_MB"):
        U.save_upload(bomb, "photos.zip", tmp_path)
    with pytest.raises(InputError, match="unpacks to 64 MiB"):  # several files bundled in the sidebar
        U.bundle_files([("a.png", b"x"), ("photos.zip", bomb)], (".png",))
    (tmp_path / "photos.zip").write_bytes(bomb)  # a zip in the data directory, read by a run (CLI, worker)
    with pytest.raises(InputError, match="unpacks to 64 MiB"):
        load_pictures(str(tmp_path / "photos.zip"))
    monkeypatch.setattr(zipfile.ZipFile, "read", real_read)
    monkeypatch.setenv("ANISO_MAX_UNPACKED_MB", "100")  # under the limit: read as before (not an image)
    with pytest.raises(InputError, match="not a readable image"):
        load_pictures(str(tmp_path / "photos.zip"))


@pytest.mark.parametrize("w,h", [(30000, 30000), (13000, 13000), (8000, 6000)])
def test_a_huge_image_is_refused_from_its_header(tmp_path, monkeypatch, w, h):
    """A tiny file of huge dimensions: refused with the numbers, never decoded (PIL's own
    DecompressionBombError above 179 MP was a traceback in the CLI)."""
    import io
    import zipfile

    from PIL import Image

    from core.inputs.modalities import load_pictures

    raw = png_header_only(w, h)
    assert len(raw) < 400_000
    monkeypatch.setenv("ANISO_MAX_IMAGE_PIXELS", "40000000")
    monkeypatch.setattr(Image.Image, "load", lambda self: (_ for _ in ()).throw(AssertionError("decoded")))
    (tmp_path / "big.png").write_bytes(raw)
    z = io.BytesIO()
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("big.png", raw)
    (tmp_path / "big.zip").write_bytes(z.getvalue())
    for corpus in ("big.png", "big.zip"):
        with pytest.raises(InputError, match=rf"big.png is too large an image \(.*{w * h:,} pixels\): at most "
                                             r"40,000,000 pixels per image \(ANISO_MAX_IMAGE_PIXELS\)"):
            load_pictures(str(tmp_path / corpus))


def test_images_within_the_limit_are_decoded_when_used(tmp_path, monkeypatch):
    from PIL import Image

    from core.inputs.modalities import load_pictures

    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "ok.png")
    monkeypatch.setenv("ANISO_MAX_IMAGE_PIXELS", "1200")
    (pic,) = load_pictures(str(tmp_path / "ok.png"))
    assert isinstance(pic.data, bytes) and pic.pixels.shape == (30, 40, 3) and pic.pixels[0, 0, 0] == 200
    monkeypatch.setenv("ANISO_MAX_IMAGE_PIXELS", "1199")
    with pytest.raises(InputError, match="1,200 pixels"):
        load_pictures(str(tmp_path / "ok.png"))


def test_the_bundle_limit_names_the_setting_that_sets_it(tmp_path, monkeypatch):
    """Issue 37 item 10: the 200 MiB limit of bundled files is ANISO_MAX_UPLOAD_MB's, not ANISO_MAX_UNPACKED_MB's."""
    from core.inputs import uploads as U

    monkeypatch.setenv("ANISO_MAX_UPLOAD_MB", "1")
    monkeypatch.setenv("ANISO_MAX_UNPACKED_MB", "1024")
    files = [(f"{i}.png", bytes(400_000)) for i in range(3)]  # 1.1 MiB in all, each file under the limit
    with pytest.raises(InputError, match=r"The bundle of 3 files unpacks to 1.14 MiB, more than the limit of 1 MiB for one "
                                         r"upload \(ANISO_MAX_UPLOAD_MB\)") as e:
        U.bundle_files(files, (".png",))
    assert "UNPACKED" not in str(e.value)
    monkeypatch.setenv("ANISO_MAX_UPLOAD_MB", "200")
    monkeypatch.setenv("ANISO_MAX_UNPACKED_MB", "1")
    with pytest.raises(InputError, match=r"for the files of one corpus \(ANISO_MAX_UNPACKED_MB\)"):
        U.bundle_files(files, (".png",))
