"""pawn.fileio: output files are checked before any work, with one line naming the flag and path."""

from __future__ import annotations

import pytest

from pawn.fileio import OutputPathError, check_output_file


def test_check_output_file_names_a_file_on_the_way_not_file_exists(tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(OutputPathError) as e:
        check_output_file(tmp_path / "afile" / "sub" / "x.json", "--json")
    assert str(e.value) == f"--json {tmp_path / 'afile' / 'sub' / 'x.json'}: {tmp_path / 'afile'} is a file, not a directory"
    assert (tmp_path / "afile").read_text() == "mine"
    (tmp_path / "d").mkdir()
    with pytest.raises(OutputPathError, match="is a directory, not a file"):
        check_output_file(tmp_path / "d", "--json")
    assert check_output_file(tmp_path / "new" / "x.json", "--json") == tmp_path / "new" / "x.json"
    assert (tmp_path / "new").is_dir() and not list((tmp_path / "new").iterdir())
