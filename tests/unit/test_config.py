import pytest
import yaml
from pydantic import BaseModel, ValidationError

from pipeline.config import grid, load_config
from pipeline.config.grid import axes_of, expand_grid, select
from pipeline.config.infra import InfraFile, load_infra
from pipeline.config.params import Config, ConfigError, build, read_params
from pipeline.tracking.store import resolve_uri
from tests.support import REPO_ROOT, write_params


def _keys(model: type[BaseModel], data: dict, prefix: str = "") -> set[str]:
    """The dotted keys ``data`` (a file's mapping) writes, walking into sections only."""
    keys = set()
    for name, value in data.items():
        kind = model.model_fields[name].annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys |= _keys(kind, value, f"{prefix}{name}.")
        else:
            keys.add(f"{prefix}{name}")
    return keys


def _all_keys(model: type[BaseModel]) -> set[str]:
    return _keys(model, model().model_dump())


def test_the_code_defaults_are_the_default_study_key_for_key():
    """One set of defaults: params.yaml writes out every key of the schema, each with the
    schema's default, so a key a params file leaves out means the default study's value."""
    path = REPO_ROOT / "params.yaml"
    assert read_params(path).model_dump() == Config().model_dump()
    assert _keys(Config, yaml.safe_load(path.read_text())) == _all_keys(Config)
    defaults = [v.id for v in expand_grid(Config())]
    assert defaults == [v.id for v in expand_grid(load_config(path))] and len(defaults) == 14


def test_the_infra_defaults_are_the_repo_infra_yaml_key_for_key():
    data = yaml.safe_load((REPO_ROOT / "infra.yaml").read_text())
    assert build(InfraFile, data) == InfraFile()
    assert _keys(InfraFile, data) == _all_keys(InfraFile)


def test_a_key_left_out_takes_the_default_studys_value(tmp_path):
    params = write_params(tmp_path / "params.yaml", {"train": {"max_steps": 500}})
    config = load_config(params)
    assert config.train.max_steps == 500
    assert config.model_copy(update={"train": Config().train}).model_dump() == Config().model_dump()
    assert config.train.grid["include"] == Config().train.grid["include"]  # not emptied


@pytest.mark.parametrize("name", ["quick.yaml", "gpu-cluster.yaml", "gpu-cluster-infra.yaml"])
def test_a_preset_holds_only_the_keys_it_changes(name):
    data = yaml.safe_load((REPO_ROOT / "presets" / name).read_text())
    schema = InfraFile if name.endswith("-infra.yaml") else Config
    defaults = _flat(schema().model_dump())
    assert data and {k: v for k, v in _flat(data).items() if defaults[k] == v} == {}


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and key not in ("grid", "resources_per_trial"):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_repo_params_load_and_expand():
    config = load_config(REPO_ROOT / "params.yaml")
    assert isinstance(config, Config)
    ids = [v.id for v in expand_grid(config)]
    expected = 1
    for values in axes_of(config.train.grid).values():
        expected *= len(values)
    assert len(ids) >= expected and len(ids) == len(set(ids))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"train": {"grid": {"scorer": ["none", "dot", "dott"]}}},
            "train.grid.scorer[2]: unknown scorer 'dott'; known: additive, dot",
        ),
        ({"model": {"scorer": "bahdanau"}}, "model.scorer: unknown scorer 'bahdanau'"),
        ({"modle": {}}, "modle: unknown key"),
        ({"fetch": {"split": {"sed": 1}}}, "fetch.split.sed: unknown key"),
        ({"train": {"batch_tokens": 0}}, "train.batch_tokens: Input should be greater"),
        ({"model": {"hidden_size": "big"}}, "model.hidden_size: Input should be a valid integer"),
        ({"model": {"wiring": "sideways"}}, "model.wiring: Input should be 'bahdanau' or 'luong'"),
        ({"model": {"cell": "rnn"}}, "model.cell: Input should be 'gru' or 'lstm'"),
        ({"train": {"grid": {"colour": [1]}}}, "train.grid.colour: unknown axis"),
        ({"train": {"grid": {"hidden_size": [128, -1]}}}, "train.grid.hidden_size[1]:"),
        ({"train": {"grid": {"scorer": []}}}, "train.grid.scorer: must be a non-empty list"),
        ({"train": {"only": ["nope-fwd-h1-s1"]}}, "train.only: not in the grid"),
        (
            {"train": {"grid": {"scorer": ["none"], "include": [{"seed": [1, "two"]}]}}},
            "train.grid.include[0].seed[1]: Input should be a valid integer",
        ),
        (
            {"train": {"grid": {"scorer": ["none"], "include": [{"colour": [1]}]}}},
            "train.grid.include[0].colour: unknown",
        ),
        (
            {"train": {"grid": {"scorer": ["none"], "include": [{}]}}},
            "train.grid.include[0]: must name at least one axis",
        ),
        (
            {"train": {"grid": {"scorer": ["none"], "include": [{"seed": 3}]}}},
            "train.grid: include[0]: must map axes to lists of values",
        ),
        ({"model": {"baseline": "sutskever"}}, "model.baseline: Input should be 'rnnencdec'"),
        ({"fetch": {"sha256": "abc"}}, "fetch.sha256: must be 64 hex digits"),
    ],
)
def test_bad_params_name_the_dotted_key(tmp_path, params, message):
    path = write_params(tmp_path / "params.yaml", params)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_missing_and_malformed_params_files(tmp_path):
    with pytest.raises(ConfigError, match="params file not found"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("fetch: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_config_is_frozen():
    config = Config()
    with pytest.raises(ValidationError, match="frozen"):
        config.model.hidden_size = 3  # type: ignore[misc]


def test_grid_extra_axis_in_variant_id_and_select(tmp_path):
    params = {
        "train": {
            "grid": {
                "scorer": ["none", "additive"],
                "reverse_source": [True],
                "hidden_size": [64],
                "seed": [3],
                "learning_rate": [0.001, 0.01],
            },
        }
    }
    config = load_config(write_params(tmp_path / "p.yaml", params))
    variants = expand_grid(config)
    ids = [v.id for v in variants]
    assert ids == [
        "none-rev-h64-s3-lr0.001",
        "none-rev-h64-s3-lr0.01",
        "additive-rev-h64-s3-lr0.001",
        "additive-rev-h64-s3-lr0.01",
    ]
    chosen = select(variants, ["additive-rev-h64-s3-lr0.01"])
    assert chosen[0].train.learning_rate == 0.01 and chosen[0].model.scorer == "additive"
    # config hash changes with the data and with any parameter
    assert chosen[0].config_hash("a") != chosen[0].config_hash("b")
    assert variants[2].config_hash("a") != variants[3].config_hash("a")
    with pytest.raises(ConfigError, match="--only: not in the grid: x"):
        select(variants, ["x"])


def test_config_hash_changes_with_the_training_revision(monkeypatch):
    """A code change that alters what training computes raises TRAINING_REVISION, and
    every cached variant of the code before it is then a miss."""
    variant = expand_grid(Config())[0]
    before = variant.key("data")
    monkeypatch.setattr(grid, "TRAINING_REVISION", grid.TRAINING_REVISION + 1)
    assert variant.key("data") != before
    monkeypatch.undo()
    assert variant.key("data") == before


def test_grid_include_adds_points_once_with_defaults_for_other_axes(tmp_path):
    params = {
        "model": {"hidden_size": 32},
        "train": {
            "grid": {
                "scorer": ["none", "dot"],
                "reverse_source": [False, True],
                "seed": [1],
                "include": [
                    {"scorer": ["none", "dot"], "seed": [2]},
                    {"scorer": ["none"], "reverse_source": [True], "seed": [1, 2]},
                ],
            },
        },
    }
    config = load_config(write_params(tmp_path / "p.yaml", params))
    ids = [v.id for v in expand_grid(config)]
    assert ids == [
        "none-fwd-h32-s1",
        "none-rev-h32-s1",
        "dot-fwd-h32-s1",
        "dot-rev-h32-s1",
        "none-fwd-h32-s2",
        "dot-fwd-h32-s2",
        "none-rev-h32-s2",  # none-rev-h32-s1 is already in the grid
    ]
    added = expand_grid(config)[-1]
    assert added.train.seed == 2 and added.model.reverse_source and added.model.hidden_size == 32


def test_gpu_cluster_preset_is_a_valid_params_and_infra_pair():
    config = load_config(REPO_ROOT / "presets" / "gpu-cluster.yaml")
    assert len(expand_grid(config)) == 6 * 2 * 3 * 5  # scorers x orders x sizes x seeds
    infra = load_infra(REPO_ROOT / "params.yaml", REPO_ROOT / "presets" / "gpu-cluster-infra.yaml")
    assert infra.ray.gpus_per_trial > 0 and infra.ray.storage_path.startswith("s3://")


def test_quick_preset_is_valid_and_small():
    config = load_config(REPO_ROOT / "presets" / "quick.yaml")
    assert len(expand_grid(config)) == 6 * 2
    assert config.train.max_steps <= 1000 and config.fetch.split.test_size <= 1000
    assert "unconverged" in config.report.title


def test_the_wall_clock_budget_is_refused_with_what_replaced_it(tmp_path):
    params = write_params(tmp_path / "params.yaml", {"train": {"time_budget_minutes": 2.6}})
    with pytest.raises(ConfigError, match="train.time_budget_minutes: .*train.max_steps"):
        load_config(params)


def test_infra_settings_in_a_params_file_are_refused_with_where_they_go(tmp_path):
    params = write_params(
        tmp_path / "params.yaml", {"train": {"ray": {"address": "auto"}}, "tracking": {}}
    )
    with pytest.raises(ConfigError, match="tracking, train.ray: .* move them to infra.yaml"):
        load_config(params)


def test_an_empty_params_file_is_refused(tmp_path):
    empty = tmp_path / "params.yaml"
    empty.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="empty params file"):
        load_config(empty)


def test_infra_file_env_overrides_and_project_root(tmp_path, monkeypatch):
    for key in ("RAY_ADDRESS", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "DVC_ROOT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delenv("STUDY_INFRA", raising=False)
    params = write_params(tmp_path / "params.yaml", {"report": {"title": "x"}})
    defaults = load_infra(params)
    assert defaults.source == "defaults" and defaults.root == tmp_path.resolve()
    assert defaults.cache_dir == tmp_path.resolve() / ".study_cache"
    write_params(
        tmp_path / "infra.yaml",
        {"ray": {"address": "head:6379"}, "tracking": {"uri": "http://mlflow:5000"}},
    )
    infra = load_infra(params)
    assert (infra.ray.address, infra.tracking.uri) == ("head:6379", "http://mlflow:5000")
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///other.db")
    monkeypatch.setenv("DVC_ROOT", str(tmp_path / "repo"))  # inside `dvc exp run --temp`
    infra = load_infra(params)
    assert (infra.ray.address, infra.tracking.uri) == ("auto", "sqlite:///other.db")
    assert infra.root == (tmp_path / "repo").resolve()
    assert resolve_uri(infra) == f"sqlite:///{(tmp_path / 'repo' / 'other.db').resolve()}"
    write_params(tmp_path / "infra.yaml", {"ray": {"adress": "x"}})
    with pytest.raises(ConfigError, match=r"infra.yaml: ray.adress: unknown key"):
        load_infra(params)
    with pytest.raises(ConfigError, match="nowhere.yaml: infra file not found"):
        load_infra(params, tmp_path / "nowhere.yaml")


def test_the_old_grid_include_key_says_where_it_went(tmp_path):
    path = write_params(tmp_path / "params.yaml", {"train": {"grid_include": [{"seed": [6]}]}})
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}: train.grid_include: moved into the grid as ")
    assert "train.grid.include" in str(err.value) and "\n" not in str(err.value)


def test_a_params_file_that_gives_the_grid_replaces_its_extra_points_too(tmp_path):
    """Two scorers in train.grid are two variants, not two plus the default study's extra
    points: the grid's include lives in the grid."""
    params = {"train": {"grid": {"scorer": ["none", "additive"], "seed": [1]}}}
    config = load_config(write_params(tmp_path / "p.yaml", params))
    assert [v.id for v in expand_grid(config)] == ["none-fwd-h256-s1", "additive-fwd-h256-s1"]
    assert len(expand_grid(Config())) > 3 * 2  # the default's grid has extra points
