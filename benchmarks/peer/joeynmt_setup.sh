#!/usr/bin/env bash
# Create the JoeyNMT 2.3 virtualenv used by benchmarks/peer/joeynmt.py.
#
#   bash benchmarks/peer/joeynmt_setup.sh [VENV]      (default VENV: .joeynmt-venv, beside the project)
#
# Kept outside the repository on purpose: JoeyNMT drags in ~80 packages (datasets,
# tensorboard, pylint, ...) that the project must not see. Idempotent: re-running it on an
# existing venv only re-checks the pins and the patch.
#
# Workarounds applied (both documented in benchmarks/peer/README.md):
#   1. importlib_metadata: joeynmt/helpers.py imports it, but joeynmt 2.3.0 does not
#      declare it as a dependency -> installed explicitly.
#   2. torch >= 2.7 removed the `verbose` argument of ReduceLROnPlateau; joeynmt 2.3.0's
#      build_scheduler (joeynmt/builders.py, line 179: `"verbose": False,`) still passes
#      it, so `scheduling: plateau` dies with a TypeError. The one line is deleted with sed
#      (nothing else is changed); verified below by building the scheduler.
#   3. joeynmt 2.3.0's RecurrentEncoder.forward (joeynmt/encoders.py, lines 150-155) always
#      reads a backward final state (`hidden_layerwise[-1:, 1]`), so `bidirectional: false`
#      dies with an IndexError at the first batch. Those three lines are replaced by one that
#      concatenates the top layer's final state over however many directions there are
#      (identical result for a bidirectional encoder); verified below for both.
set -euo pipefail

VENV="${1:-.joeynmt-venv}"
PY_BASE="${PYTHON:-python3}"
TORCH_VERSION="2.13.0"            # the local CPU wheel; anything else pulls GBs of CUDA
JOEYNMT_SPEC="joeynmt==2.3.*"

if [[ ! -x "$VENV/bin/python" ]]; then
    "$PY_BASE" -m venv "$VENV"
fi
PIP=("$VENV/bin/pip" install --disable-pip-version-check --quiet)

# torch FIRST, pinned, so joeynmt's `torch>=1.12` is already satisfied and pip never
# resolves a (CUDA) torch of its own.
"${PIP[@]}" "torch==$TORCH_VERSION"
"${PIP[@]}" "$JOEYNMT_SPEC" importlib_metadata
installed_torch="$("$VENV/bin/python" -c 'import torch; print(torch.__version__)')"
if [[ "$installed_torch" != "$TORCH_VERSION"* ]]; then
    echo "error: pip replaced torch ($installed_torch != $TORCH_VERSION)" >&2
    exit 1
fi

# Workaround 2: drop the `verbose` kwarg of ReduceLROnPlateau (idempotent).
BUILDERS="$("$VENV/bin/python" - <<'PY'
import importlib.util
print(importlib.util.find_spec("joeynmt").submodule_search_locations[0] + "/builders.py")
PY
)"
if grep -qE '^\s*"verbose": False,\s*$' "$BUILDERS"; then
    sed -i -E '/^\s*"verbose": False,\s*$/d' "$BUILDERS"
    echo "patched: removed '\"verbose\": False,' from $BUILDERS"
fi

# Workaround 3: a unidirectional RecurrentEncoder (idempotent; exact-text replacement).
"$VENV/bin/python" - <<'PY'
import importlib.util
from pathlib import Path

path = Path(importlib.util.find_spec("joeynmt").submodule_search_locations[0]) / "encoders.py"
text = path.read_text()
old = (
    "        fwd_hidden_last = hidden_layerwise[-1:, 0]\n"
    "        bwd_hidden_last = hidden_layerwise[-1:, 1]\n"
    "\n"
    "        # only feed the final state of the top-most layer to the decoder\n"
    "        # pylint: disable=no-member\n"
    "        hidden_concat = torch.cat([fwd_hidden_last, bwd_hidden_last], dim=2).squeeze(0)\n"
)
new = (
    "        # only feed the final state of the top-most layer to the decoder\n"
    "        # [attention_study patch: any number of directions; was fwd/bwd only]\n"
    "        hidden_concat = hidden_layerwise[-1].transpose(0, 1).reshape(batch_size, -1)\n"
)
if old in text:
    path.write_text(text.replace(old, new))
    print(f"patched: unidirectional RecurrentEncoder in {path}")
elif new not in text:
    raise SystemExit(f"error: {path} is not the joeynmt 2.3.0 text this patch expects")
PY

# Smoke check: the plateau scheduler builds and the package imports.
"$VENV/bin/python" - <<'PY'
import torch
import joeynmt
from joeynmt.builders import build_scheduler
from joeynmt.helpers import check_version

opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
sched, at = build_scheduler({"scheduling": "plateau", "patience": 0,
                             "decrease_factor": 0.5}, opt, "max", 256)
assert at == "validation", at

from joeynmt.encoders import RecurrentEncoder

for bidirectional in (False, True):
    enc = RecurrentEncoder(rnn_type="gru", hidden_size=8, emb_size=4,
                           bidirectional=bidirectional)
    out, final = enc(torch.zeros(2, 3, 4), torch.tensor([3, 2]), None)
    assert final.shape == (2, 8 * (1 + bidirectional)), final.shape
print(f"ok: joeynmt {check_version()} / torch {torch.__version__}: plateau scheduler and "
      "uni/bidirectional RecurrentEncoder work")
PY
