"""docs/models.md lists every architecture family of core/inputs/anatomy.py with its module names: the table in the
page is the one the module prints (`python -m core models --anatomy`)."""

from pathlib import Path

from core.inputs import anatomy

DOC = Path(__file__).resolve().parents[2] / "docs" / "models.md"


def test_the_docs_table_is_the_anatomy_modules():
    text = DOC.read_text()
    assert anatomy.markdown_table() in text
    for e in anatomy.FAMILIES:  # each family once, with its block list and its output projection
        row = next(line for line in text.splitlines() if line.startswith(f"| {e.family} ("))
        assert f"`{e.blocks}`" in row and (e.mlp_out is None or f".N.{e.mlp_out}`" in row)


def test_every_part_a_family_lacks_says_why():
    for r in anatomy.family_table():
        for stat in ("attention", "chain"):
            if not r["applies"][stat]:
                assert r["not_applicable"].get(stat), (r["family"], stat)
