"""The study's memory: evidence from trial attributes, sampler seeds, finalists (pure parts)."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from tuner.config import Outcome
from tuner.space import load_space
from tuner.study import finalists
from tuner.study.learn import evidence_of, sampler_seed

SPACE = load_space(Path(__file__).resolve().parents[1] / "fixtures" / "spaces" / "tiny-failing-sim.yaml")
DISTS = {
    "mem-fraction-static": FloatDistribution(0.5, 0.95, step=0.05),
    "cuda_graph": CategoricalDistribution(["off", "max:8", "max:16"]),
    "sparse_backends.prefill": CategoricalDistribution(["trtllm", "fa3", "flashmla_sparse"]),
    "sparse_backends.decode": CategoricalDistribution(["trtllm", "fa3", "flashmla_sparse"]),
}


def trial(number: int, values: tuple[float, float], *, feasible: bool = True, **attrs: object) -> FrozenTrial:
    t = create_trial(
        params={"mem-fraction-static": 0.8, "cuda_graph": "off", "sparse_backends.prefill": "trtllm",
                "sparse_backends.decode": "fa3"},
        distributions=DISTS,
        values=list(values),
        user_attrs={"feasible": feasible, **attrs},
        state=TrialState.COMPLETE,
    )  # fmt: skip
    t.number = number
    return t


def test_evidence_reads_the_attributes_a_launch_left_and_joins_the_backend_pair() -> None:
    attrs = {"outcome": "unsupported", "failure": "unsupported", "stage": "capture", "failure_backend": "fa3",
             "failure_backend_role": "decode", "failure_message": "no kernel image"}  # fmt: skip
    t = trial(3, (0, 0), feasible=False, **attrs)
    ev = evidence_of(SPACE, t)
    assert ev is not None and ev.outcome is Outcome.UNSUPPORTED and ev.stage == "capture"
    assert (ev.knobs.prefill, ev.knobs.decode, ev.backend, ev.backend_role) == (
        "trtllm",
        "fa3",
        "fa3",
        "decode",
    )


def test_a_failed_launch_told_fail_with_its_verdict_is_evidence_and_a_retried_one_is_not() -> None:
    attrs = {"outcome": "oom", "failure": "oom", "stage": "load", "failure_message": "CUDA out of memory"}
    told = trial(4, (0, 0), feasible=False, **attrs, pending_tell={"state": "FAIL", "verdict": True})
    failed = create_trial(params=told.params, distributions=DISTS, state=TrialState.FAIL,
                          user_attrs=told.user_attrs)  # fmt: skip
    ev = evidence_of(SPACE, failed)
    assert ev is not None and ev.outcome is Outcome.OOM
    retried = create_trial(params=told.params, distributions=DISTS, state=TrialState.FAIL,
                           user_attrs={**attrs, "pending_tell": {"state": "FAIL"}})  # fmt: skip
    assert evidence_of(SPACE, retried) is None
    assert finalists.launch_counts([failed, retried], {}) == (1, 0)  # the budget counts the result only


def test_trials_that_launched_nothing_are_no_evidence() -> None:
    for attr in ("pruned", "forbidden", "dedup_of", "duplicate_running"):
        assert evidence_of(SPACE, trial(1, (1, 1), **{attr: True})) is None


def test_seeds_differ_by_worker_and_by_ask_but_repeat_for_the_same_ask() -> None:
    seeds = {sampler_seed(7, host, n) for host in ("a", "b") for n in range(50)}
    assert len(seeds) == 100
    assert sampler_seed(7, "a", 3) == sampler_seed(7, "a", 3) != sampler_seed(8, "a", 3)


def test_finalists_are_the_front_first_then_the_closest_to_utopia() -> None:
    trials = [
        trial(0, (100.0, 1000.0)),
        trial(1, (90.0, 2000.0)),  # front
        trial(2, (120.0, 500.0)),  # front
        trial(3, (95.0, 900.0)),  # dominated by 0
        trial(4, (200.0, 5000.0), feasible=False),  # infeasible: never a finalist
        trial(5, (300.0, 9000.0), pruned=True),  # not launched
    ]
    picks = finalists.pick_finalists(trials, ("maximize", "maximize"), 4)
    assert set(picks[:3]) == {0, 1, 2} and picks[3] == 3


def test_finalist_jobs_are_claimed_in_turn_and_the_budget_caps_them() -> None:
    trials = [trial(0, (1.0, 1.0)), trial(2, (2.0, 0.5))]
    state = {"0": 0, "2": 0}
    claimed = []
    while (found := finalists.next_job(trials, state, repeats=2)) is not None:
        job, state = found
        claimed.append((job.trial.number, job.repeat))
    assert claimed == [(0, 1), (0, 2), (2, 1), (2, 2)] and finalists.claimed(state) == 4
    assert finalists.affordable(3, 2, 12) == 1 and finalists.affordable(3, 2, 40) == 3
    assert finalists.affordable(3, 2, 7) == 0


def _at(number: int, throughput: float, fraction: float, graphs: str) -> FrozenTrial:
    t = trial(number, (throughput, 1000.0 * fraction))
    return create_trial(
        params={**t.params, "mem-fraction-static": fraction, "cuda_graph": graphs}, distributions=DISTS,
        values=t.values, user_attrs=t.user_attrs, state=TrialState.COMPLETE,
    )  # fmt: skip


def test_finalists_are_only_contested_candidates_and_no_fraction_twins() -> None:
    trials = [_at(0, 100.0, 0.8, "max:8"), _at(1, 99.0, 0.9, "max:8"), _at(2, 97.0, 0.8, "max:16"),
              _at(3, 80.0, 0.95, "off")]  # fmt: skip
    for n, t in enumerate(trials):
        t.number = n
    dirs, fraction = ("maximize", "maximize"), ["mem-fraction-static"]
    # 0 and 1 differ in the fraction only: one finalist (1, ranked first); 3 is 20% below: not contested
    assert finalists.pick_finalists(trials, dirs, 3, twin_params=fraction, margin=0.1) == [1, 2]
    assert set(finalists.pick_finalists(trials, dirs, 3)) == {0, 1, 3}  # no filter: the front as before
    # one candidate left in contest: nothing to re-measure, the whole budget explores
    assert finalists.pick_finalists(trials[:2] + trials[3:], dirs, 3, twin_params=fraction, margin=0.1) == []
    # the reserve is claimed only when the launches left are what the picks need
    assert finalists.reserve_state(trials, dirs, count=3, repeats=2, left=5, twin_params=fraction,
                                   margin=0.1) is None  # fmt: skip
    assert finalists.reserve_state(trials, dirs, count=3, repeats=2, left=4, twin_params=fraction,
                                   margin=0.1) == {"1": 0, "2": 0}  # fmt: skip


def test_a_repeats_knowledge_gradient_grows_with_the_noise_and_falls_with_the_gap() -> None:
    def kg(firsts: list[float], noise: float, repeated: int = 2, direction: str = "maximize") -> float:
        return finalists.repeat_gain(firsts, direction, repeated=repeated, repeats=1, noise=noise)

    # two equal measurements, one repeat each: the difference's mean moves with sd = noise, gain noise·phi(0)
    assert abs(kg([100.0, 100.0], 0.02) - 0.02 / (2 * math.pi) ** 0.5) < 1e-12
    assert kg([100.0, 99.0], 0.02) < kg([100.0, 100.0], 0.02) < kg([100.0, 100.0], 0.04)
    assert kg([100.0, 90.0], 0.02) < 1e-3 * kg([100.0, 99.0], 0.02)  # a 10% gap: noise of 2% cannot close it
    assert kg([100.0, 99.0], 0.02, repeated=1) < kg([100.0, 99.0], 0.02)  # only the best re-measured
    assert kg([100.0, 99.0], 0.02, repeated=0) == 0.0 and kg([100.0], 0.02) == 0.0
    # a latency: the lower is the best, the gap read the same way
    assert abs(kg([10.0, 10.1], 0.02, direction="minimize") - kg([10.1, 10.0], 0.02)) < 1e-12


def test_the_reserve_is_claimed_only_when_the_repeats_are_worth_more_than_exploring() -> None:
    trials = [_at(0, 100.0, 0.8, "max:8"), _at(1, 99.5, 0.8, "max:16"), _at(2, 99.0, 0.8, "off")]
    for n, t in enumerate(trials):
        t.number = n
    dirs = ("maximize", "maximize")
    kw = {"count": 3, "repeats": 1, "left": 3, "margin": 0.05}
    kg = finalists.repeat_gain([100.0, 99.5, 99.0], "maximize", repeated=3, repeats=1, noise=0.02)
    promising = finalists.Outlook(gain=2 * kg / 3, noise=0.02)  # three launches exploring: 2x the repeats
    spent = finalists.Outlook(gain=kg / 6, noise=0.02)
    assert finalists.reserve_state(trials, dirs, **kw, outlook=promising) is None
    assert finalists.reserve_state(trials, dirs, **kw, outlook=spent) == {"0": 0, "1": 0, "2": 0}
    assert finalists.reserve_state(trials, dirs, **kw) == {"0": 0, "1": 0, "2": 0}  # another sampler


def test_per_role_sampling_round_trips_through_optuna() -> None:
    from tuner.space.sampling import joined_params, sampler_params, suggest

    study = optuna.create_study(directions=["maximize", "maximize"])
    study.enqueue_trial(sampler_params(SPACE, dict(SPACE.baselines[0])))
    t = study.ask()
    config, params = suggest(SPACE, t)
    assert params["sparse_backends"] == "trtllm/trtllm" and config.sparse_decode_backend == "trtllm"
    assert joined_params(SPACE, t.params) == dict(SPACE.baselines[0])


def test_a_reuse_of_trial_0_launched_nothing_and_counts_as_no_launch() -> None:
    from tuner.study.learn import launched, measured_before

    original = trial(0, (10.0, 100.0), cfg_hash="k")
    reuse = trial(1, (10.0, 100.0), cfg_hash="k", dedup_of=0)
    pruned = trial(2, (0.0, 0.0), feasible=False, pruned=True, forbidden=False, dedup_of=None)
    assert launched(original.user_attrs)
    assert not launched(reuse.user_attrs) and not launched(pruned.user_attrs)
    assert evidence_of(SPACE, reuse) is None
    assert finalists.pick_finalists([original, reuse], ("maximize", "maximize"), 2) == [0]
    assert measured_before([reuse, original], "k", exclude=5) is original
    assert measured_before([reuse], "k", exclude=5) is None
    # the budget: 1 launch finished + 2 finalist repeats; the reuse and the pruned ask are not launches
    assert finalists.launch_counts([original, reuse, pruned], {"0": 2}) == (3, 0)


def test_a_trial_is_learned_and_keyed_as_what_sglang_ran() -> None:
    """Asked max:16, SGLang ran without graphs (torch_native): the rules see graphs off, and a later ask
    whose launch key is that of what ran reuses the measurement."""
    from tuner.study.learn import measured_before

    t = trial(4, (100, 1), outcome="ok", cfg_hash="asked", effective_key="ran", effective_graphs=False,
              effective_graph_max_bs=None)  # fmt: skip
    t.params["cuda_graph"] = "max:16"
    ev = evidence_of(SPACE, t)
    assert ev is not None and ev.knobs.graphs is False and ev.knobs.graph_max_bs is None
    plain = evidence_of(SPACE, trial(5, (100, 1), outcome="ok", cfg_hash="x"))
    assert plain is not None and plain.knobs.graphs is False  # "off" as asked: unchanged
    assert measured_before([t], "ran", exclude=9) is t and measured_before([t], "asked", exclude=9) is t
    assert measured_before([t], "other", exclude=9) is None
