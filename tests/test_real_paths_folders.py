"""Paths resolved with their folders resolved once (`run.recording.workfolder.real_path` with a cache of
folders, issue 48: a plan of 1,024 inputs resolves each three times) equal `os.path.realpath` of each, for
links to files, links to folders, relative paths, '..', missing files and a trailing separator."""

from __future__ import annotations

import os

from sam3tiles.run.recording.workfolder import real_path


def test_cached_folders_resolve_every_path_as_realpath_does(tmp_path, monkeypatch):
    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "a.tif").write_bytes(b"x")
    (real / "sub" / "b.tif").write_bytes(b"y")
    os.symlink(real, tmp_path / "linkdir")
    os.symlink(real / "sub" / "b.tif", real / "link.tif")  # a file link in a folder of plain files
    os.symlink("sub/b.tif", real / "rel.tif")  # a relative link
    os.symlink(tmp_path / "nowhere.tif", real / "dangling.tif")
    monkeypatch.chdir(real)
    paths = ["a.tif", "link.tif", "rel.tif", "dangling.tif", "missing.tif", "sub/b.tif", "sub/../a.tif",
             "sub/..", ".", "sub/", str(tmp_path / "linkdir" / "a.tif"), str(tmp_path / "linkdir" / "link.tif"),
             str(tmp_path / "linkdir" / "sub" / "b.tif"), str(real / "sub" / ".." / "link.tif"), "~/x.tif"]
    dirs: dict = {}
    for p in paths * 2:  # the second pass through the filled cache
        assert real_path(p, dirs) == real_path(p) == \
            __import__("pathlib").Path(os.path.realpath(os.path.expanduser(p))), p
    assert len(dirs) >= 3  # folders were resolved once each and reused
