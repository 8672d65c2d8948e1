"""tools.convergence: the slope of each seed's last updates and the seed median."""

import numpy as np
import pandas as pd
import pytest

from tools.convergence import by_configuration, configuration, slopes


def _curve(variant: str, slope_per_1k: float, last: int) -> pd.DataFrame:
    steps = np.arange(200, last + 1, 200)
    noise = np.random.default_rng(len(variant)).normal(0, 0.01, len(steps))
    return pd.DataFrame(
        {"variant": variant, "step": steps, "dev_bleu": 10 + slope_per_1k * steps / 1000 + noise}
    )


def test_each_seed_s_slope_is_fitted_over_its_last_window_and_the_median_taken():
    curves = pd.concat(
        [
            _curve("none-fwd-h256-s1", 0.2, 4000),
            _curve("none-fwd-h256-s2", 0.6, 3600),
            _curve("none-fwd-h256-s3", 1.4, 5000),
            _curve("additive-fwd-h256-s1", 0.1, 1000),  # shorter than the window
        ]
    )
    per_variant = slopes(curves, window=2000).set_index("variant")
    assert per_variant.loc["none-fwd-h256-s2", "slope"] == pytest.approx(0.6, abs=0.05)
    assert per_variant.loc["none-fwd-h256-s3", "last_step"] == 5000
    assert pd.isna(per_variant.loc["additive-fwd-h256-s1", "slope"])
    table = by_configuration(per_variant.reset_index())
    assert table.loc["none-fwd-h256", "median_slope"] == pytest.approx(0.6, abs=0.05)
    assert table.loc["none-fwd-h256", "updates"] == 12600
    assert table.loc["none-fwd-h256", "seeds"] == 3


def test_a_slope_that_changes_is_read_only_over_the_window():
    """Rising fast early, flat for the last 2,000 updates: flat."""
    steps = np.arange(200, 6001, 200)
    bleu = np.where(steps < 4000, steps / 200, 20.0)
    curves = pd.DataFrame({"variant": "general-fwd-h256-s1", "step": steps, "dev_bleu": bleu})
    (slope,) = slopes(curves, window=2000).slope
    assert slope == pytest.approx(0.0, abs=1e-9)


def test_the_seed_is_taken_from_the_variant_id_only():
    assert configuration("additive-fwd-h128-s3") == "additive-fwd-h128"
    assert configuration("cosine-fwd-h16-s1-lr0.01") == "cosine-fwd-h16-lr0.01"
