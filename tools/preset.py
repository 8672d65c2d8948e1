"""Apply a preset: write ``params.yaml`` = the default study with the preset's keys over it.

A preset (``presets/<name>.yaml``) is an overlay: it holds only the keys it changes, and
every key it leaves out is the default study's (the defaults of
``pipeline/config/params.py``, which the repo's ``params.yaml`` writes out). DVC tracks
``params.yaml``, so the tool writes the whole study there, each key the preset changes
marked with a comment, and ``dvc repro`` (or ``make study``) runs it:

    python -m tools.preset quick            # params.yaml: the default study + presets/quick.yaml
    make study PRESET=quick                 # the same, then dvc repro
    python -m tools.preset --list           # the presets and the keys each changes
    git checkout params.yaml                # back to the default study

A key the study does not have stops it with one line naming the key and the file
(``error: presets/quick.yaml: train.max_step: unknown key``), before anything is written.
A ``params.yaml`` with edits of your own is not overwritten without ``--force``. The write
is atomic: a failed run leaves the old file. Infrastructure presets
(``presets/*-infra.yaml``) are not applied: name one with ``STUDY_INFRA``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from pipeline.config.grid import expand_grid, validate_grid
from pipeline.config.params import Config, ConfigError, read_params
from pipeline.io import write_text
from pipeline.scorers.plugins import PluginError

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ROOT / "presets"
INFRA_SUFFIX = "-infra"
"""``presets/<name>-infra.yaml``: the infrastructure file of preset ``<name>``."""
MARK = "# Written by `python -m tools.preset "
MARK_RE = re.compile(re.escape(MARK) + r"(\S+)`")


def leaves(config: Config) -> dict[str, Any]:
    """Every key of the study, dotted (``train.max_steps``) -> its value: sections are
    walked into, any other value (the grid, a list) is one key."""

    def walk(model: type[BaseModel], data: dict[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, field in model.model_fields.items():
            kind = field.annotation
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                out.update(walk(kind, data[name], f"{prefix}{name}."))
            else:
                out[f"{prefix}{name}"] = data[name]
        return out

    return walk(Config, config.model_dump(mode="json"), "")


def changes(config: Config) -> dict[str, tuple[Any, Any]]:
    """The keys whose values differ from the default study's: key -> (default, value)."""
    default, values = leaves(Config()), leaves(config)
    return {k: (default[k], v) for k, v in values.items() if v != default[k]}


def overlay_path(name: str) -> Path:
    """``quick`` -> ``presets/quick.yaml``; a path to a ``.yaml`` file is taken as is."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        return path
    return Path(os.path.relpath(PRESETS / f"{name}.yaml"))


def preset_name(path: Path) -> str:
    return path.stem if path.parent.resolve() == PRESETS.resolve() else str(path)


def resolve(path: Path, params: Path) -> Config:
    """The default study with ``path``'s keys over it, validated as a stage validates
    params (its plugins relative to ``params``' folder); no side effect."""
    if path.stem.endswith(INFRA_SUFFIX):
        raise ConfigError(
            f"{path}: an infrastructure file (Ray, MLflow), not study params: name it with "
            f"STUDY_INFRA={path} (docs/infra.md)"
        )
    try:
        config = read_params(path, root=params.resolve().parent)
        validate_grid(config)
    except (ConfigError, PluginError) as err:
        message = str(err)
        message = message if message.startswith(str(path)) else f"{path}: {message}"
        raise ConfigError(message) from None
    return config


def render(config: Config, name: str) -> str:
    """``params.yaml``'s text: a header, then every key, those the preset changes marked."""
    changed = changes(config)
    header = [
        f"{MARK}{name}`: the default study with the {len(changed)} keys",
        f'# of the preset over it, each marked "# {name}". Every key is documented in',
        "# pipeline/config/params.py. Edit freely: dvc repro reads this file, and a key left",
        "# out takes the default study's value. Back to the default study:",
        "#   git checkout params.yaml",
    ]
    body = yaml.dump(config.model_dump(mode="json"), Dumper=_Dumper, sort_keys=False, width=88)
    lines, stack = [], []
    for line in body.splitlines():
        match = re.match(r"^( *)([A-Za-z_]\w*):(?: |$)", line)
        if match:
            indent = len(match[1])
            if not indent:
                lines.append("")
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, match[2]))
            key = ".".join(k for _, k in stack)
            if key in changed:
                default = _scalar(changed[key][0])
                line += f"  # {name}" + (f"; default {default}" if len(default) <= 20 else "")
        lines.append(line)
    text = "\n".join(header + lines) + "\n"
    if yaml.safe_load(text) != config.model_dump(mode="json"):  # a bug, never the user's
        raise RuntimeError(f"rendering {name} changed a value")
    return text


class _Dumper(yaml.SafeDumper):
    """Mappings as blocks, lists of scalars on one line (``scorer: [none, additive]``)."""

    def represent_list(self, data):
        flow = not any(isinstance(item, dict | list) for item in data)
        return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow)


_Dumper.add_representer(list, _Dumper.represent_list)


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).removesuffix("\n...\n").strip()


def own_edits(params: Path) -> str | None:
    """Why ``params`` must not be overwritten without ``--force``: values of its own, not
    the default study's nor those of the preset this tool last wrote there. None if free."""
    if not params.is_file():
        return None
    try:
        config = read_params(params)
    except (ConfigError, PluginError) as err:
        return f"it does not load ({err})"
    base = Config()
    written = MARK_RE.match(params.read_text(encoding="utf-8"))
    if written and changes(config):
        try:
            base = resolve(overlay_path(written[1]), params)
        except ConfigError:
            pass  # the preset is gone or broken: compare with the default study
    ours, theirs = leaves(config), leaves(base)
    edited = [f"{key}: {_scalar(value)}" for key, value in ours.items() if value != theirs[key]]
    if not edited:
        return None
    more = ", ..." if edited[3:] else ""
    return f"it has values of its own ({', '.join(edited[:3])}{more})"


def presets() -> list[Path]:
    """The params presets (not their infrastructure files)."""
    return [p for p in sorted(PRESETS.glob("*.yaml")) if not p.stem.endswith(INFRA_SUFFIX)]


def describe(path: Path) -> str:
    config = resolve(path, ROOT / "params.yaml")
    keys = ", ".join(changes(config))
    return f"{preset_name(path)}: {len(expand_grid(config))} variants; changes {keys}"


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Presets: " + ", ".join(p.stem for p in presets()),
    )
    cli.add_argument("preset", nargs="?", help="a name in presets/ (quick) or a .yaml file")
    cli.add_argument("--params", type=Path, default=ROOT / "params.yaml", help="file to write")
    cli.add_argument("--force", action="store_true", help="overwrite edits of your own")
    cli.add_argument("--list", action="store_true", help="list the presets and what they change")
    args = cli.parse_args(argv)
    try:
        if args.list:
            for path in presets():
                print(describe(path))
            return 0
        if not args.preset:
            cli.error("name a preset (or --list)")
        path = overlay_path(args.preset)
        if not path.is_file():
            known = ", ".join(p.stem for p in presets())
            raise ConfigError(f"{path}: no such preset; known: {known}")
        name = preset_name(path)
        config = resolve(path, args.params)
        reason = None if args.force else own_edits(args.params)
        if reason:
            raise ConfigError(
                f"{args.params}: not overwritten: {reason}; commit or stash them, or --force"
            )
        write_text(args.params, render(config, name))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(
        f"{os.path.relpath(args.params)}: the default study with {os.path.relpath(path)}'s "
        f"{len(changes(config))} keys ({len(expand_grid(config))} variants); run it: dvc repro"
    )
    infra = path.with_name(f"{path.stem}{INFRA_SUFFIX}.yaml")
    if infra.is_file():
        print(f"its infrastructure: STUDY_INFRA={os.path.relpath(infra)} (docs/infra.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
