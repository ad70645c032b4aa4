"""The capacity objective: how a space declares it, where its load search starts and stops, how its
curve names what bound it, and how its records reach the trial's row."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.reports import make_row
from support.stored import make_result

from tuner.bench.settings import BenchSettings
from tuner.capacity.objective import curve_points, kv_bound, little_jump, plan_for, run_key
from tuner.capacity.search import Knob, Measurement, Search, SearchPlan
from tuner.errors import ConfigError
from tuner.metrics import trial_values
from tuner.space.goals import CapacitySpec, Slo
from tuner.space.loader import load_space
from tuner.store.capacity import CapacityRecord, bind_rows

ROOT = Path(__file__).resolve().parents[2]
TINY = (ROOT / "search_spaces" / "tiny-fast-sim.yaml").read_text()
SLOS = (Slo(metric="ttft_p99_ms", op="<=", bound=300.0),)


def _space(tmp_path: Path, objectives: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(TINY.replace("objectives: [output_throughput, kv_tokens]", objectives))
    return path


def test_a_space_declares_the_capacity_with_bench_serving_names(tmp_path: Path) -> None:
    text = (
        "objectives:\n  - capacity: {slo: [p99_ttft_ms <= 2000, tpot_p99_ms <= 50], load: concurrency, "
        "precision: 0.05}\n  - kv_tokens"
    )
    space = load_space(_space(tmp_path, text))
    first = space.objectives[0]
    assert (first.metric, first.direction) == ("capacity_concurrency", "maximize")
    assert first.capacity is not None and first.capacity.precision == 0.05
    assert [s.name for s in first.capacity.slo] == ["ttft_p99_ms<=2000", "tpot_p99_ms<=50"]
    assert space.objectives[1].metric == "kv_tokens"


@pytest.mark.parametrize(
    ("objectives", "words"),
    [
        ("objectives: [capacity_request_rate]", "measured by a load search"),
        ("objectives:\n  - capacity: {slo: []}", "at least one SLO"),
        ("objectives:\n  - capacity: {slo: [ttft_p99_ms <= 1]}\n  - capacity: {slo: [ttft_p99_ms <= 1], "
         "load: concurrency}", "one capacity objective at most"),
        ("objectives:\n  - capacity: {slo: [ttft_p99_ms <= 1], load: qps}", "load"),
        ("objectives: [capacity_request_rate_per_gpu, kv_tokens]", "needs a capacity objective"),
    ],
)  # fmt: skip
def test_a_wrong_capacity_objective_is_refused_in_one_line(
    tmp_path: Path, objectives: str, words: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        load_space(_space(tmp_path, objectives))
    assert words in str(exc.value)


def test_the_search_starts_from_the_study_and_is_bounded_by_the_kv_pool() -> None:
    conc = CapacitySpec(slo=SLOS, load="concurrency")
    cold = plan_for(conc, prior=[], bench_concurrency=64, kv_requests=None)
    assert (cold.start, cold.step) == (64.0, 2.0)
    warm = plan_for(conc, prior=[10.0, 30.0, 12.0], bench_concurrency=64, kv_requests=None)
    assert warm.start == 12.0 and warm.step < 2.0  # the median of the launches so far, finer steps
    pooled = plan_for(conc, prior=[], bench_concurrency=64, kv_requests=20)
    assert pooled.start == 20.0 and pooled.high == 40.0  # KV tokens bound the concurrency
    rate = plan_for(CapacitySpec(slo=SLOS, start=3.0), prior=[10.0], bench_concurrency=64, kv_requests=5)
    assert rate.start == 3.0 and rate.knob is Knob.REQUEST_RATE and rate.high > 5


def test_the_kv_bound_counts_what_a_request_holds_at_its_end() -> None:
    bench = BenchSettings.model_validate({"workload": {"input_len": 900, "output_len": 100}})
    assert kv_bound(10_000, bench) == 10
    assert kv_bound(None, bench) is None


def test_a_concurrency_search_stops_at_its_stated_precision() -> None:
    plan = SearchPlan(knob=Knob.CONCURRENCY, start=100, slos=SLOS, tolerance=0.1, relative=True)
    assert plan.done(100, 110) and not plan.done(100, 120)
    exact = replace(plan, relative=False)
    assert not exact.done(100, 110) and exact.done(100, 101)


def test_each_kind_of_launch_has_its_own_search() -> None:
    assert run_key("trial-0007") == run_key("trial-0012") == "first"
    assert run_key("finalist-0007-1") == "repeat-1" != run_key("finalist-0007-2")


def _run(load: float, ttft: float, in_flight: float) -> Measurement:
    return Measurement(
        load=load, values={"ttft_p99_ms": ttft, "concurrency": in_flight}, completed=10, failed=0
    )


def test_a_failing_load_whose_requests_overflow_the_kv_pool_names_the_pool() -> None:
    bench = BenchSettings.model_validate({"workload": {"input_len": 900, "output_len": 100}})
    search = Search(plan=SearchPlan(knob=Knob.CONCURRENCY, start=8, slos=SLOS))
    search.record(_run(8, 100.0, 8))
    search.record(_run(16, 900.0, 15))  # 15 x 1,000 tokens > the 12,000-token pool
    points = curve_points(search, 12_000, bench)
    assert points[0]["limits"] == [] and points[1]["limits"] == ["slo:ttft_p99_ms<=300", "kv_pool"]
    assert curve_points(search, 50_000, bench)[1]["limits"] == ["slo:ttft_p99_ms<=300"]
    record = CapacityRecord(
        study="s", trial_number=3, row_id=0, config_hash="h", knob="concurrency",
        slos=("ttft_p99_ms<=300",), capacity=8.0, points=points, outcome="ok",
    )  # fmt: skip
    line = record.line()
    assert (
        "#3: 8 concurrent requests within ttft_p99_ms<=300, bound by SLO ttft_p99_ms<=300 and the KV pool"
        in line
    )


def test_in_study_records_are_bound_to_their_launchs_first_row() -> None:
    first = make_row(0, id=5, config_hash="aaa")
    repeat = make_row(0, id=9, config_hash="aaa", confirm_of=5)
    other = make_row(1, id=6, config_hash="bbb")
    made = CapacityRecord(study="s", trial_number=None, row_id=0, config_hash="aaa", knob="request_rate",
                          slos=(), capacity=2.0, points=(), outcome="ok")  # fmt: skip
    given = replace(made, row_id=6, config_hash="bbb", trial_number=1)  # `tuner capacity`'s own
    bound = bind_rows((made, given), (repeat, first, other))
    assert [(r.row_id, r.trial_number) for r in bound] == [(5, 0), (6, 1)]


def test_the_load_search_s_capacity_is_the_trial_s_metric() -> None:
    result = replace(make_result(), stage_metrics={"capacity_request_rate": 4.5, "not_a_metric": 1.0})
    values = trial_values(result)
    assert values["capacity_request_rate"] == 4.5 and "not_a_metric" not in values
    assert trial_values(make_result())["capacity_request_rate"] is None


def _rate_run(load: float, e2e_ms: float, ttft: float = 100.0) -> Measurement:
    values = {"ttft_p99_ms": ttft, "e2e_p50_ms": e2e_ms, "duration_s": 10.0}
    return Measurement(load=load, values=values, completed=int(10 * load) + 1, failed=0)


def test_a_cold_rate_search_jumps_toward_what_the_server_can_hold() -> None:
    search = Search(plan=plan_for(CapacitySpec(slo=SLOS), prior=[], bench_concurrency=8, kv_requests=None))
    assert little_jump(search, in_flight=8, kv_requests=None) is None  # nothing measured yet
    search.record(_rate_run(1.0, 50.0))  # 8 in flight at most / 0.05 s: no more than 160 req/s served
    assert little_jump(search, in_flight=8, kv_requests=None) == 80.0
    assert little_jump(search, in_flight=8, kv_requests=2) == 20.0  # the KV pool holds fewer
    slow = Search(plan=search.plan)
    slow.record(_rate_run(1.0, 400.0))  # 1 in flight / 0.4 s: 2.5 req/s at most, half is below 2
    assert little_jump(slow, in_flight=1, kv_requests=None) is None  # no further than a doubling
    failed = Search(plan=search.plan)
    failed.record(_rate_run(1.0, 50.0, ttft=900.0))
    assert little_jump(failed, in_flight=8, kv_requests=None) is None
    search.record(_rate_run(80.0, 60.0))
    assert little_jump(search, in_flight=8, kv_requests=None) is None  # once, from the first load


def test_the_search_starts_from_this_study_s_capacities_else_from_a_warm_start(tmp_path: Path) -> None:
    from tuner.capacity.objective import CapacityExecutor
    from tuner.store.sql import SqlStore

    def save(url: str, record: CapacityRecord) -> None:
        with SqlStore(url) as store:
            store.save_capacity(record)

    space = load_space(ROOT / "search_spaces" / "tiny-capacity-sim.yaml")
    url = f"sqlite:///{tmp_path / 'exp.db'}"
    spec = space.objectives[0].capacity
    assert spec is not None
    slos = tuple(s.name for s in spec.slo)
    record = CapacityRecord(study="old", trial_number=0, row_id=0, config_hash="h", knob="request_rate",
                            slos=slos, capacity=40.0, points=(), outcome="ok")  # fmt: skip
    save(url, record)
    save(url, replace(record, slos=("ttft_p99_ms<=1",), capacity=5.0))  # other SLOs: not this search's
    assert CapacityExecutor(space, db_url=url, study="new")._prior() == []
    warm = CapacityExecutor(space, db_url=url, study="new", warm=(url, "old"))
    assert warm._prior() == [40.0]
    save(url, replace(record, study="new", capacity=60.0))
    assert warm._prior() == [60.0]  # the study's own launches, once it has some
    save(url, replace(record, study="new", capacity=20.0, config_hash="mine"))
    assert warm._prior("mine") == [20.0]  # a launch measured again (a finalist) starts from its own
    assert sorted(warm._prior("other")) == [20.0, 60.0]


def test_a_concurrency_load_point_sends_a_request_per_client_and_stays_within_the_client_s_limits() -> None:
    from tuner.bench.settings import MAX_PROMPTS
    from tuner.capacity.run import point_settings

    bench = BenchSettings()
    point = point_settings(bench, Knob.CONCURRENCY, 256, 16).load_points[0]
    assert (point.concurrency, point.num_prompts) == (256, 256)
    huge = point_settings(bench, Knob.CONCURRENCY, 10 * MAX_PROMPTS, None).load_points[0]
    assert huge.concurrency == huge.num_prompts == MAX_PROMPTS
    spec = CapacitySpec(slo=SLOS, load="concurrency")
    assert plan_for(spec, prior=[], bench_concurrency=8, kv_requests=10 * MAX_PROMPTS).high == MAX_PROMPTS


def test_a_load_the_server_died_under_is_bound_by_the_death_not_by_unmeasured_slos() -> None:
    from tuner.capacity.search import judge_point

    died = Measurement(load=56, values={}, completed=0, failed=0, died="oom")
    verdict = judge_point(56, [died], SLOS, Knob.CONCURRENCY)
    assert not verdict.passed and verdict.limits == ("died",)


def test_the_capacity_per_gpu_is_what_each_of_the_launch_s_gpus_buys() -> None:
    from tuner.metrics import derived_values

    assert derived_values({"capacity_request_rate": 12.0}, 4)["capacity_request_rate_per_gpu"] == 3.0
    assert derived_values({"capacity_request_rate": None}, 4)["capacity_request_rate_per_gpu"] is None
