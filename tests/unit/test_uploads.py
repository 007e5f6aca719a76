"""Uploads named as the user named them, referred to by id, previewed before Run (core/uploads.py)."""

import pandas as pd
import pytest

from core import uploads as U
from core.errors import InputError


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

    from core.modalities import corpus_modality

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
