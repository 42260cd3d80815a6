"""`sam3tiles qgis install`: the QGIS plugin (a Processing provider) copied into a QGIS profile."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import click

from ..errors import OutputError, OutputExistsError
from .options import handle_errors

PLUGIN = "sam3tiles_qgis"
#: The file in the installed plugin that lists sam3tiles' backends and devices (`plugin_choices`).
CHOICES = "choices.json"


def plugin_source() -> Path:
    """The plugin folder shipped as package data (never imported by sam3tiles itself: it needs qgis)."""
    return Path(__file__).resolve().parents[1] / "integrations" / "qgis_plugin" / PLUGIN


def plugin_choices() -> dict[str, list[str]]:
    """What the plugin offers as choices, from sam3tiles' own lists: the backends the registry knows (the
    built-ins first) and `model.providers.DEVICES`. Written into the installed plugin as CHOICES: QGIS's
    Python may not import sam3tiles, so the plugin keeps no list of its own."""
    from ..model.providers import DEVICES
    from ..model.registry import available_backends

    return {"backends": list(available_backends()), "devices": list(DEVICES)}


def default_plugins_dir() -> Path:
    """The default QGIS 3 profile's plugin folder on this system."""
    if sys.platform == "win32":
        base = Path(os.environ.get("APPDATA", Path.home() / "AppData" / "Roaming"))
        return base / "QGIS" / "QGIS3" / "profiles" / "default" / "python" / "plugins"
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "QGIS" / "QGIS3" / "profiles" / "default" / "python" / "plugins"


def install_plugin(dest: Path | None = None, overwrite: bool = False) -> Path:
    """Copy the plugin folder into `dest` (default: the QGIS profile's plugins), with its CHOICES
    (`plugin_choices`); returns its new path. An existing folder is replaced only with `overwrite` and only
    when it is ours (has our metadata)."""
    folder = Path(dest) if dest is not None else default_plugins_dir()
    target = folder / PLUGIN
    if target.exists():
        ours = (target / "metadata.txt").is_file() and "name=sam3tiles" in (target / "metadata.txt").read_text()
        if not ours:
            raise OutputError(f"{target} exists and is not the sam3tiles plugin: move it away, or give --dest")
        if not overwrite:
            raise OutputExistsError(f"{target} exists: pass --overwrite to replace it with this version")
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{PLUGIN}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(plugin_source(), tmp, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", CHOICES))
    (tmp / CHOICES).write_text(json.dumps(plugin_choices(), indent=1) + "\n", encoding="utf-8")
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    return target


@click.group(short_help="The QGIS Processing provider.")
def qgis() -> None:
    """The sam3tiles QGIS plugin: a Processing provider (algorithm sam3tiles:segment) that runs this
    command line."""


@qgis.command(short_help="Install the QGIS plugin.")
@click.option("--dest", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Plugins folder to install into (default: the default QGIS 3 profile's).")
@click.option("--overwrite", is_flag=True, help="Replace an installed sam3tiles plugin.")
@handle_errors
def install(dest: Path | None, overwrite: bool) -> None:
    """Write the plugin folder sam3tiles_qgis into the QGIS profile (or --dest). Then enable it in QGIS
    (Plugins > Manage and Install Plugins > Installed), and, if QGIS does not find this command on PATH,
    set Settings > Options > Processing > Providers > sam3tiles > sam3tiles command to the command this
    prints (or set $SAM3TILES_CLI to it)."""
    target = install_plugin(dest, overwrite)
    click.echo(f"installed the QGIS plugin in {target}")
    exe = shutil.which("sam3tiles")
    click.echo(f"sam3tiles command for its setting (or $SAM3TILES_CLI): {exe or sys.executable + ' -m sam3tiles'}")
