"""The plane of free memory over the memory knobs (tuner.search.memory_trend): fitted on a few launches
of some groups, it places the out-of-memory boundary of groups no launch has tried."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import optuna
import pytest

from tuner.search import plane, sampler
from tuner.search.feasible import Mechanism
from tuner.search.memory_trend import fit_trend
from tuner.search.plane import _memory_plane, memory_sizes
from tuner.search.sampler import _running_offset, space_candidates
from tuner.search.strategy import Seen
from tuner.space.loader import SearchSpace, load_space, suggest
from tuner.space.sampling import sampler_params

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "search_spaces" / "dsv32-fp8-h200-sim.yaml"  # fraction 0.78-0.95; graphs off, 64, 128, 256
TOTAL = 143_771.0


def free_of(fraction: float, max_bs: int) -> float:
    """A GPU whose peak grows with the static pool and by 60 MiB per captured batch size."""
    return TOTAL * (0.97 - fraction) - 60.0 * max_bs


def test_the_plane_recovers_a_linear_peak_and_says_where_it_stops_fitting() -> None:
    # sizes on [0, 1]: (fraction over 0.78-0.95, graphs on, largest batch over 0-256)
    def row(f: float, bs: int) -> list[float]:
        return [(f - 0.78) / 0.17, 1.0 if bs else 0.0, bs / 256]

    launched = [(0.80, 0), (0.90, 0), (0.85, 64), (0.82, 128)]
    trend = fit_trend(
        np.asarray([row(*x) for x in launched]), np.asarray([free_of(*x) for x in launched]), TOTAL
    )
    assert trend is not None
    mu, _ = trend.predict(np.asarray([row(0.93, 256), row(0.80, 256)]))
    assert mu == pytest.approx([free_of(0.93, 256), free_of(0.80, 256)], abs=0.03 * TOTAL)
    p = trend.p_fits(np.asarray([row(0.95, 256), row(0.79, 0)]))
    assert p[0] < 0.3 and p[1] > 0.9
    assert fit_trend(np.asarray([row(0.8, 0)]), np.asarray([free_of(0.8, 0)]), TOTAL) is None  # one launch
    assert fit_trend(np.asarray([row(*x) for x in launched]), np.ones(4), 0.0) is None  # no GPU size


def test_with_the_static_pool_known_two_launches_at_one_fraction_place_every_other_fraction() -> None:
    def row(f: float, bs: int) -> list[float]:
        return [(f - 0.78) / 0.17, 1.0 if bs else 0.0, bs / 256]

    launched = [(0.85, 0), (0.85, 128)]  # one fraction: the plane alone cannot tell its slope
    sizes = np.asarray([row(*x) for x in launched])
    free = np.asarray([free_of(*x) for x in launched])
    at = np.asarray([row(0.95, 0), row(0.78, 0)])
    known = fit_trend(sizes, free, TOTAL, known={0: -0.17 * TOTAL})
    plain = fit_trend(sizes, free, TOTAL)
    assert known is not None and plain is not None
    assert known.predict(at)[0] == pytest.approx([free_of(0.95, 0), free_of(0.78, 0)], abs=0.02 * TOTAL)
    assert abs(plain.predict(at)[0][0] - free_of(0.95, 0)) > 0.05 * TOTAL  # a flat guess
    assert known.predict(at)[1][0] < 0.5 * plain.predict(at)[1][0]


def test_the_static_pool_slope_is_the_fraction_range_times_the_gpu() -> None:
    found, _ = space_candidates(load_space(H200))
    assert plane.static_pool_slope(found, TOTAL) == {0: pytest.approx(-(0.95 - 0.78) * TOTAL)}


def _study(
    launches: Sequence[tuple[float, str | int, float | None]],
    total: float | None,
    path: Path = H200,
    pair: str = "flashmla_kv/flashmla_kv",
    captured: int | None = None,
    slos: Callable[[float | None], dict[str, float]] | None = None,
) -> optuna.Study:
    space = load_space(path)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(directions=["maximize", "maximize"])
    for fraction, graphs, free in launches:
        params = {"mem-fraction-static": fraction, "cuda_graph": graphs, "sparse_backends": pair}
        study.enqueue_trial(sampler_params(space, params))
        trial = study.ask()
        suggest(space, trial)
        trial.set_user_attr("gpu_total_mib", total)
        trial.set_user_attr("captured_graph_max_bs", captured if graphs == "on" else None)
        trial.set_user_attr("feasible", free is not None)
        trial.set_user_attr("outcome", "ok" if free is not None else "oom")
        trial.set_user_attr("failure", None if free is not None else "oom")
        trial.set_user_attr("min_free_vram_mib", free)
        for name, margin in (slos(free) if slos is not None else {}).items():
            trial.set_user_attr(f"c_slo:{name}", margin)
        if free is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, [1000.0, 1e5])
    return study


def _seen(study: optuna.Study, found_index: dict[str, int], path: Path = H200) -> list[Seen]:
    from tuner.search.candidates import params_key
    from tuner.space.sampling import joined_params

    space = load_space(path)
    out = []
    for t in study.get_trials(deepcopy=False):
        ok = t.user_attrs["feasible"]
        out.append(
            Seen(
                index=found_index[params_key(joined_params(space, t.params))], log_first=0.0 if ok else None,
                second=None, feasible=ok, trial=t.number, failed=None if ok else Mechanism.MEMORY,
            )
        )  # fmt: skip
    return out


# launches of the H200 space without graphs and with two graph sizes, by free_of
H200_LAUNCHES = [
    (f, g, free_of(f, bs))
    for f, g, bs in ((0.80, "off", 0), (0.90, "off", 0), (0.85, "max:64", 64), (0.82, "max:128", 128))
]


def test_the_sampler_places_an_untried_graph_size_from_the_launches_of_others() -> None:
    space = load_space(H200)
    found, _ = space_candidates(space)
    launches = H200_LAUNCHES
    study = _study(launches, TOTAL)
    fits = _memory_plane(found, study.get_trials(deepcopy=False), _seen(study, found.index()))
    assert fits is not None
    p = {(c.mem_fraction_static, (c.cuda_graph.effective_max_bs or 0) if c.cuda_graph else 0): fits[i]
         for i, c in enumerate(found.configs) if c.sparse_prefill_backend == "flashmla_kv"}  # fmt: skip
    assert p[(0.95, 256)] < 0.3  # never launched with graphs of 256: past its boundary at the top
    assert p[(0.79, 256)] > 0.8  # ... and clear of it at the bottom
    assert p[(0.8, 64)] > p[(0.95, 64)]
    no_size = _study(launches, None)  # an older study: no GPU size told
    assert _memory_plane(found, no_size.get_trials(deepcopy=False), _seen(no_size, found.index())) is None


def test_a_launch_that_ran_out_of_memory_pulls_the_plane_down_around_it() -> None:
    space = load_space(H200)
    found, _ = space_candidates(space)
    ran = [(0.80, "off", free_of(0.80, 0)), (0.86, "off", free_of(0.86, 0))]
    plain = _study(ran, TOTAL)
    failed = _study([*ran, (0.84, "max:128", None)], TOTAL)
    before = _memory_plane(found, plain.get_trials(deepcopy=False), _seen(plain, found.index()))
    after = _memory_plane(found, failed.get_trials(deepcopy=False), _seen(failed, found.index()))
    assert before is not None and after is not None
    row = next(
        i for i, c in enumerate(found.configs)
        if c.mem_fraction_static == 0.83 and c.cuda_graph and c.cuda_graph.effective_max_bs == 128
        and c.sparse_prefill_backend == "flashmla_kv"
    )  # fmt: skip
    assert after[row] < before[row]


def test_the_sizes_are_on_the_unit_range_and_unknown_for_sglangs_own_graph_list() -> None:
    space = load_space(ROOT / "search_spaces" / "glm5-nvfp4-b200-tp4-sim.yaml")  # graphs: off, 32, 64, on
    found, _ = space_candidates(space)
    sizes = memory_sizes(found)
    known = ~np.isnan(sizes).any(axis=1)
    assert known.any() and not known.all()
    assert (sizes[known] >= 0).all() and (sizes[known] <= 1).all()
    for i, c in enumerate(found.configs):
        assert known[i] == (
            c.cuda_graph is None or not c.cuda_graph.enabled or c.cuda_graph.effective_max_bs is not None
        )


B200 = ROOT / "search_spaces" / "glm5-nvfp4-b200-tp4-sim.yaml"  # graphs: off, 32, 64, on; TP 4
B200_TOTAL = 183_359.0


def test_sglangs_own_graph_list_is_sized_by_the_release_then_by_what_its_launches_captured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(plane, "OWN_GRAPH_SIZE", True)  # a measured option (docs/design.md)
    space = load_space(B200)
    found, _ = space_candidates(space)

    def free_b200(fraction: float, max_bs: int) -> float:
        return B200_TOTAL * (0.97 - fraction) - 60.0 * max_bs

    pair = "flashinfer_sparse_mla/flashinfer_sparse_mla"
    launches = [(0.70, "off", free_b200(0.70, 0)), (0.76, "max:64", free_b200(0.76, 64))]
    study = _study(launches, B200_TOTAL, B200, pair)
    trials, seen = study.get_trials(deepcopy=False), _seen(study, found.index(), B200)
    attrs = {t.number: t.user_attrs for t in trials}
    own = plane.own_graph_sizes(found, seen, attrs, space, B200_TOTAL)
    assert own is not None
    on = np.asarray([p["cuda_graph"] == "on" for p in found.params])
    assert (own[on] == 512).all() and np.isnan(own[~on]).all()  # a B200 is over 160 GB: SGLang's 512
    assert not np.isnan(memory_sizes(found, own)).any()
    fits = _memory_plane(found, trials, seen, space)
    assert fits is not None and not np.isnan(fits).any()
    keys = ("mem-fraction-static", "cuda_graph", "sparse_backends", "chunked-prefill-size")
    at = {tuple(p[k] for k in keys): fits[i] for i, p in enumerate(found.params)}
    assert at[(0.84, "on", pair, 8192)] < at[(0.84, "max:64", pair, 8192)]  # a list of 512 holds more
    # a launch of SGLang's list that captured up to 128 (a model's own cap) sizes it from then on
    told = _study([*launches, (0.72, "on", free_b200(0.72, 128))], B200_TOTAL, B200, pair, captured=128)
    attrs = {t.number: t.user_attrs for t in told.get_trials(deepcopy=False)}
    own = plane.own_graph_sizes(found, _seen(told, found.index(), B200), attrs, space, B200_TOTAL)
    assert own is not None and (own[on] == 128).all()
    # with no GPU size told and no capture reported, the list's size is not known: left out of the plane
    assert plane.own_graph_sizes(found, seen, {}, space, 0.0) is None


def test_an_out_of_memory_launch_is_a_censored_value_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    # one knob on [0, 1] (the fraction); the truth: free = 0.3 T - 0.5 T x size
    def truth(x: float) -> float:
        return TOTAL * (0.3 - 0.5 * x)

    launched = np.asarray([[0.0], [0.2], [0.4]])
    free = np.asarray([truth(0.0), truth(0.2), truth(0.4)])
    far = np.asarray([[1.0]])  # ran out of memory far past the boundary (truth -0.2 T)
    plain = fit_trend(launched, free, TOTAL, far)
    monkeypatch.setattr("tuner.search.memory_trend.CENSORED", True)
    censored = fit_trend(launched, free, TOTAL, far)
    assert plain is not None and censored is not None
    at = np.asarray([[0.8], [1.0]])
    plain_mu, _ = plain.predict(at)
    censored_mu, _ = censored.predict(at)
    # as a value at -2% the failure pulls the plane up toward itself; censored, it says "below -2%" only
    assert plain_mu[1] > censored_mu[1]
    assert abs(censored_mu[0] - truth(0.8)) < abs(plain_mu[0] - truth(0.8))
    assert censored_mu[1] < -0.02 * TOTAL
    # a failure where the measured launches put a fit lowers the chance of a fit there, either way
    near = np.asarray([[0.5]])  # the measured line says 0.05 T free there
    for censor in (True, False):
        monkeypatch.setattr("tuner.search.memory_trend.CENSORED", censor)
        without, with_failure = fit_trend(launched, free, TOTAL), fit_trend(launched, free, TOTAL, near)
        assert without is not None and with_failure is not None
        assert with_failure.p_fits(near)[0] < without.p_fits(near)[0] - 0.2


def _capped_space(folder: Path, caps: tuple[int, ...]) -> SearchSpace:
    """The tiny space with max running requests as a knob (`caps`), 64 clients, a cap of 64 as baseline."""
    text = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()
    knob = f"  - {{name: max-running-requests, kind: categorical, choices: {list(caps)}}}\n"
    text = text.replace("params:\n", "params:\n" + knob)
    text = text.replace("{concurrency: 4, num_prompts: 8}", "{concurrency: 64, num_prompts: 128}")
    text = text.replace("size: null}", "size: null, max-running-requests: 64}")
    (folder / "space.yaml").write_text(text)
    return load_space(folder / "space.yaml")


def test_the_running_cap_prior_lowers_a_cap_below_the_clients_for_throughput_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    space = _capped_space(tmp_path, (16, 64, 256))
    found, _ = space_candidates(space)
    maximise = [optuna.study.StudyDirection.MAXIMIZE] * 2
    assert _running_offset(space, found, ["output_throughput", "kv_tokens"], maximise) is None  # off
    monkeypatch.setattr(sampler, "RUNNING_PRIOR", 0.5)
    offset = _running_offset(space, found, ["output_throughput", "kv_tokens"], maximise)
    assert offset is not None
    by_cap = {p["max-running-requests"]: float(o) for p, o in zip(found.params, offset, strict=True)}
    assert by_cap == pytest.approx({16: 0.5 * np.log(16 / 64), 64: 0.0, 256: 0.0})  # the clients cap it
    minimise = [optuna.study.StudyDirection.MINIMIZE, maximise[1]]
    assert _running_offset(space, found, ["ttft_p99_ms", "kv_tokens"], minimise) is None


def test_a_graph_list_is_cut_at_the_running_cap_and_summed_when_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    space = _capped_space(tmp_path, (8, 64, 256))
    found, _ = space_candidates(space)
    graphs = [i for i, c in enumerate(found.configs) if c.cuda_graph and c.cuda_graph.effective_max_bs]
    top = max(found.configs[i].cuda_graph.effective_max_bs or 0 for i in graphs)  # type: ignore[union-attr]
    assert top > 8
    row = next(i for i in graphs if found.configs[i].cuda_graph.effective_max_bs == top  # type: ignore[union-attr]
               and found.params[i]["max-running-requests"] == 8)  # fmt: skip
    twin = next(i for i in graphs if found.params[i] == {**found.params[row], "max-running-requests": 256})
    plain, cut = memory_sizes(found), memory_sizes(found, caps=("max-running-requests",))
    assert plain[row, 2] == plain[twin, 2]  # as asked, the cap does not show in the graphs' size
    assert cut[row, 2] < cut[twin, 2]  # SGLang captures nothing past the request pool of 8
    monkeypatch.setattr(plane, "GRAPH_SUM", True)
    summed = memory_sizes(found, caps=("max-running-requests",))
    assert summed.shape[1] == cut.shape[1] + 1
    assert summed[row, -1] < summed[twin, -1] and not np.isnan(summed).any()


def test_a_free_vram_floor_is_met_where_the_plane_leaves_room_above_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    space = load_space(H200)
    found, _ = space_candidates(space)
    launches = H200_LAUNCHES[:3]
    floor = free_of(0.88, 0)  # a floor the launches at 0.88 and above do not keep

    def margins(free: float | None) -> dict[str, float]:
        return {f"min_free_vram_mib>={floor:g}": floor - (free or 0.0), "tpot_p50_ms<=40": -1.0}

    study = _study(launches, TOTAL, slos=margins)
    trials = study.get_trials(deepcopy=False)
    fitted = plane.fitted_plane(found, trials, _seen(study, found.index()), space)
    assert plane.vram_floors(fitted, trials) is None  # a measured option, off (docs/design.md)
    monkeypatch.setattr(plane, "PLANE_FLOORS", True)
    floors = plane.vram_floors(fitted, trials)
    assert floors is not None and set(floors) == {0}  # the floor is the first SLO by name; TPOT has none
    met = {(c.mem_fraction_static, c.cuda_graph.effective_max_bs if c.cuda_graph else None): floors[0][i]
           for i, c in enumerate(found.configs) if c.sparse_prefill_backend == "flashmla_kv"}  # fmt: skip
    assert met[(0.8, None)] > 0.9 and met[(0.94, None)] < 0.1
    assert met[(0.86, 256)] < met[(0.86, None)]  # graphs hold memory too
