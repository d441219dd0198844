"""benchmarks/prior_coverage.py: coverage of the scorecard's intervals on a
report's spreads, by class and noise group, simulated from recorded figures."""
import pandas as pd

from conftest import benchmark


def _figures():
    """Two classes as a report records them: eight alike quiet figures, and
    four of one class of which one spreads ten times as much as the others."""
    quiet = [{"class": "acceleration (cpu, interleaved)", "var": 0.01 ** 2, "dof": 2}] * 8
    mixed = ([{"class": "deployment (cpu, interleaved)", "var": 0.03 ** 2, "dof": 2}] * 3
             + [{"class": "deployment (cpu, interleaved)", "var": 0.3 ** 2, "dof": 2}])
    return pd.DataFrame(quiet + mixed)


def test_each_way_holds_its_level_and_the_class_prior_spares_the_noisy_figure():
    pc = benchmark("prior_coverage")
    res = pc.simulate(_figures(), reports=400, seed=1)
    # against the median spread (1%): the quiet class typical, the other noisy
    assert set(res["group"].iloc[:8]) == {"typical"} and set(res["group"].iloc[8:]) == {"noisy"}
    # each figure's own t holds its 95% in every group (400 reports: within about 3%)
    own = pc.table(res, "group")["own_coverage"]
    assert (own >= 0.92).all(), own
    # the class prior narrows the alike quiet figures against their own t, and
    # the report-wide prior, pulled up by the other class, widens them
    by_class = pc.table(res, "class")
    quiet = by_class.loc["acceleration (cpu, interleaved)"]
    assert quiet["class_half_width"] < 0.8 * quiet["own_half_width"], quiet
    assert quiet["class_half_width"] < quiet["pooled_half_width"], quiet
    # the noisy figure keeps its level under its class's prior
    assert res["class_coverage"].iloc[-1] >= 0.9, res.iloc[-1]
    assert by_class["class_coverage"].min() >= 0.92, by_class


def test_rounds_replaces_each_figures_recorded_rounds():
    """``--rounds``: every figure constructed with that many rounds, whatever
    it recorded; fewer rounds widen its own t, and each way keeps its level."""
    pc = benchmark("prior_coverage")
    two = pc.simulate(_figures(), reports=400, seed=1, rounds=2)
    five = pc.simulate(_figures(), reports=400, seed=1, rounds=5)
    quiet = slice(0, 8)
    # own t on 1 degree of freedom (12.7) against 4 (2.78): several times as wide
    assert (two["own_half_width"].iloc[quiet] > 2 * five["own_half_width"].iloc[quiet]).all()
    # the class prior lends the alike figures degrees of freedom: far narrower than own t
    assert (two["class_half_width"].iloc[quiet] < 0.5 * two["own_half_width"].iloc[quiet]).all()
    for res in (two, five):
        assert pc.table(res, "group")["own_coverage"].min() >= 0.92
