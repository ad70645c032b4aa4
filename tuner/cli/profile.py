"""Commands around a chosen trial: report (tables and plots), export (launch profile), confirm (re-run)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from tuner.cli.output import (
    MAX_COUNT,
    MAX_REPEATS,
    bounded_int,
    check_writable,
    csv_safe,
    database_arg,
    output_folder,
    release,
    stores_of,
    write_file,
    written,
)
from tuner.errors import ConfigError, ExitCode

if TYPE_CHECKING:
    from tuner.report.frame import StudyData
    from tuner.store.protocol import StoreOpener


def _add_choice(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        type=database_arg,
        default=None,
        help="SQLAlchemy URL or SQLite path (default ./experiments.db)",
    )
    p.add_argument(
        "--study", default=None, help="study name (default: the space's, or the database's only one)"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--trial", type=bounded_int(0, MAX_COUNT), default=None, metavar="N", help="this Optuna trial number"
    )
    which.add_argument(
        "--best", action="store_true", help="pick from the feasible Pareto front (the default)"
    )
    p.add_argument(
        "--prefer",
        default="balanced",
        metavar="balanced|throughput|kv|OBJECTIVE",
        help="with --best: closest to the utopia point of the study's objectives (default), the best "
        "output throughput or KV tokens, or the best value of one of the study's objectives",
    )
    p.add_argument(
        "--min-free-vram",
        type=bounded_int(0, 1 << 24),
        default=None,
        metavar="MIB",
        dest="min_free_mib",
        help="with --best: only trials whose lowest free GPU memory stayed at least this",
    )
    p.add_argument(
        "--allow-infeasible",
        action="store_true",
        help="with --trial: accept a trial that was not feasible (missed a constraint, failed its gate, ...)",
    )


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add export, confirm and report to the command line."""
    export = sub.add_parser(
        "export", help="write a trial's launch profile: shell script, SGLang --config YAML, JSON"
    )
    _add_choice(export)
    export.add_argument(
        "--space", type=Path, default=None, help="take the study name (and SGLang) from this space"
    )
    export.add_argument("--format", choices=("sh", "yaml", "json"), default="sh")
    export.add_argument(
        "--sglang-version",
        type=release,
        default=None,
        metavar="V",
        help="re-render the knobs and fixed flags for SGLang release V (renames applied, removals reported)",
    )
    export.add_argument(
        "--engine",
        choices=("sglang", "sim"),
        default=None,
        help="with --sglang-version: launch with real SGLang (default) or the simulator pretending to be V",
    )
    export.add_argument("-o", "--output", type=Path, default=None, metavar="FILE", help="default: stdout")
    export.set_defaults(handler=cmd_export)

    confirm = sub.add_parser("confirm", help="relaunch a trial's configuration N times and record each run")
    _add_choice(confirm)
    confirm.add_argument("--space", required=True, type=Path, help="the study's search space YAML")
    confirm.add_argument("--repeats", type=bounded_int(1, MAX_REPEATS), default=3)
    confirm.set_defaults(handler=cmd_confirm)

    report = sub.add_parser("report", help="write a study's tables (CSV) and plots (PNG) to a folder")
    report.add_argument("--db", type=database_arg, default=None)
    report.add_argument("--study", default=None)
    report.add_argument("--space", type=Path, default=None, help="take the study name from this space")
    report.add_argument("--out", type=Path, default=None, help="folder for the CSV and PNG files")
    report.add_argument(
        "--html",
        type=Path,
        default=None,
        metavar="FILE",
        help="one self-contained HTML report (opens offline)",
    )
    report.set_defaults(handler=cmd_report)


def _preferred(args: argparse.Namespace) -> str | None:
    """The study of the --space given, if any (the database's only study otherwise)."""
    if getattr(args, "space", None) is None:
        return None
    from tuner.space.loader import load_space

    return load_space(args.space).study_name


def _table(version: str, space_path: Path | None) -> Any:
    """The option table of the trial's SGLang: the installed parser for a real-SGLang space, else built in."""
    from tuner.sglang.introspect import option_table_for
    from tuner.sglang.options import builtin_table

    if space_path is not None:
        from tuner.space.loader import load_space

        space = load_space(space_path)
        if space.engine.kind == "sglang":
            return option_table_for(version, space.engine.python or sys.executable)
    return builtin_table(version)


def _target_table(version: str) -> Any:
    """Release `version`'s table: the installed SGLang's own parser when it is that release, else built in."""
    from tuner.sglang.introspect import detect_sglang_version, option_table_for
    from tuner.sglang.options import builtin_table

    if detect_sglang_version(sys.executable) == version:
        return option_table_for(version, sys.executable)
    return builtin_table(version)


def cmd_export(args: argparse.Namespace) -> int:
    from tuner.report.export import build_profile, select
    from tuner.report.frame import load_study_data
    from tuner.report.profile import render
    from tuner.store.connect import database_url

    if args.engine is not None and args.sglang_version is None:
        raise ConfigError(
            f"--engine {args.engine}: expected --sglang-version V with it (the release to render)"
        )
    if args.output is not None:  # a path that cannot be written is refused before anything is said
        check_writable(args.output, "-o")
    data = load_study_data(
        database_url(args.db), args.study, preferred=_preferred(args), goodput=True, stores=stores_of(args)
    )
    if args.trial is None and (args.allow_infeasible and not args.best):
        raise ConfigError(
            "--allow-infeasible: expected --trial N with it (--best only picks feasible trials)"
        )
    choice = select(
        data,
        trial=args.trial,
        prefer=args.prefer,
        min_free_mib=args.min_free_mib,
        allow_infeasible=args.allow_infeasible,
    )
    profile = build_profile(data, choice)
    table = _table(profile.sglang_version, args.space)
    if args.sglang_version is not None:
        from tuner.report.rerender import for_release

        target = _target_table(args.sglang_version)
        profile = for_release(profile, table, target, engine=args.engine or "sglang")
        table = target
        for note in profile.notes:
            print(note, file=sys.stderr)
    text = render(profile, args.format, table)
    if choice.reason:
        print(choice.reason, file=sys.stderr)
    if choice.warning:
        print(f"warning: {choice.warning}", file=sys.stderr)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_file(args.output, text, "-o", mode=0o755 if args.format == "sh" else None)
    print(
        f"wrote {args.output} (study {profile.study}, trial {profile.trial}, {args.format})", file=sys.stderr
    )
    return 0


def cmd_confirm(args: argparse.Namespace) -> int:
    from tuner.cli.display import result_line
    from tuner.report.export import select
    from tuner.report.frame import load_study_data
    from tuner.space.loader import load_space
    from tuner.store.connect import database_url
    from tuner.study.confirm import confirm

    space = load_space(args.space)
    url = database_url(args.db)
    stores = stores_of(args)
    if args.repeats < 1:
        raise ConfigError(f"--repeats: expected at least 1 (got {args.repeats})")
    with stores(url, create=False) as store:
        name = store.resolve_study(args.study, preferred=space.study_name)
    choice = select(
        load_study_data(url, name, stores=stores),
        trial=args.trial,
        prefer=args.prefer,
        min_free_mib=args.min_free_mib,
        allow_infeasible=args.allow_infeasible,
    )

    def on_result(i: int, result: Any) -> None:
        print(f"repeat {i}/{args.repeats}: {result_line(result)}", file=sys.stderr, flush=True)

    run = confirm(
        space,
        db_url=url,
        study=name,
        original=choice.row,
        trial=args.trial,
        repeats=args.repeats,
        on_result=on_result,
        stores=stores,
    )
    if choice.reason:
        print(choice.reason, file=sys.stderr)
    _print_confirmed(run, load_study_data(url, run.study, stores=stores), url)
    if run.interrupted:
        return ExitCode.INTERRUPTED
    return 0 if run.all_ok else 1


def _print_confirmed(run: Any, data: StudyData, url: str) -> None:
    """What the repeats recorded, every measurement of the configuration (median, range, n) and how to
    export it."""
    from tuner.metrics import METRICS, SPREAD_METRICS
    from tuner.report.export import build_profile, select
    from tuner.store.connect import mask_url

    original = next(r for r in data.rows if r.id == run.original_id)
    profile = build_profile(
        data,
        select(data, trial=run.trial, allow_infeasible=True)
        if run.trial is not None
        else _as_choice(original),
    )
    print(
        f"study {run.study}, trial {run.trial}: {len(run.row_ids)} repeat(s) recorded "
        f"({', '.join(o.value for o in run.outcomes) or 'none'}); all measurements of this configuration "
        f"(original + {profile.n_confirm} repeat(s)):"
    )
    for metric in SPREAD_METRICS:
        spread = profile.confirmations.get(metric)
        if spread is not None:
            m = METRICS[metric]  # label and format from the registry
            print(
                f"  {m.title:<18} median {m.show(spread.median):>16}   min {m.show(spread.low):>16}   "
                f"max {m.show(spread.high):>16}   n={spread.n}"
            )
    shown = mask_url(url)  # a password stays out of the terminal: the user adds it back
    where = f"--db {shown} --study {run.study} --trial {run.trial}"
    print(f"export it: python -m tuner export {where} --format sh")


def _save_capacity(data: StudyData, out: Path, context: str) -> None:
    """capacity.csv and each trial's latest capacity curve (capacity_N.png)."""
    from tuner.report.capacity_plot import capacity_plot
    from tuner.report.detail import capacity_frame
    from tuner.report.plots import save_png
    from tuner.store.capacity import latest_by_row

    with written(out / "capacity.csv", "--out") as fh:
        csv_safe(capacity_frame(data.capacity)).to_csv(fh, index=False)
    for record in latest_by_row(data.capacity).values():
        who = record.trial_number if record.trial_number is not None else f"row{record.row_id}"
        figure = capacity_plot(record, context=context)
        with written(out / f"capacity_{who}.png", "--out", binary=True) as fh:
            save_png(figure, fh)


def _as_choice(row: Any) -> Any:
    from tuner.report.export import Choice

    return Choice(row=row)


def cmd_report(args: argparse.Namespace) -> int:
    from tuner.report.frame import load_study_data
    from tuner.store.connect import database_url

    stores = stores_of(args)
    if args.out is None and args.html is None:
        raise ConfigError("report: expected --out DIR (CSV and PNG files) and/or --html FILE")
    if args.html is not None:
        check_writable(args.html, "--html")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise ConfigError(f"--out {args.out}: is a file; expected a folder")
    url = database_url(args.db)
    data = load_study_data(url, args.study, preferred=_preferred(args), goodput=True, stores=stores)
    if args.html is not None:
        from tuner.report.page import study_page

        write_file(args.html, study_page(data, stores=stores), "--html")
        print(f"wrote {args.html}")
    if args.out is not None:
        out = output_folder(args.out, "--out")
        _save_report(data, out, url, stores)
        print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} to {out}")
    return 0


def _save_report(data: StudyData, out: Path, url: str, stores: StoreOpener) -> None:
    """The report's CSV tables and PNG figures in `out`."""
    from tuner.report.context import context_line
    from tuner.report.detail import failures_frame, param_importances, requests_frame
    from tuner.report.frame import trials_frame
    from tuner.report.knobs import fraction_param
    from tuner.report.pareto import front_frame, pareto_front
    from tuner.report.plots import (
        history_plot,
        latency_plot,
        metric_vs_param_plot,
        pareto_plot,
        per_gpu_per_user_informative,
        per_gpu_per_user_plot,
        save_png,
    )

    front = pareto_front(data)
    frame = trials_frame(data, front)
    context = context_line(data)

    def save(name: str, write: Callable[[IO[Any]], object]) -> None:
        with written(out / name, "--out", binary=name.endswith(".png")) as fh:
            write(fh)

    save("trials.csv", lambda f: csv_safe(frame).to_csv(f, index=False))
    save("front.csv", lambda f: csv_safe(front_frame(data, front)).to_csv(f, index=False))
    save("failures.csv", lambda f: csv_safe(failures_frame(data)).to_csv(f, index=False))
    if data.capacity:
        _save_capacity(data, out, context)
    importances = param_importances(data.trials, data.directions, data.metric_names)
    if importances.note:
        print(f"importances: {importances.note}", file=sys.stderr)
    save("importances.csv", lambda f: csv_safe(importances.table).to_csv(f))
    title = f"{data.name}: Pareto front"
    save("pareto.png", lambda p: save_png(pareto_plot(frame, title=title, context=context), p))
    save("history.png", lambda p: save_png(history_plot(frame, context=context), p))
    skipped = per_gpu_per_user_informative(frame)
    if skipped:
        print(f"per_gpu_per_user.png not written: {skipped}", file=sys.stderr)
    else:
        save("per_gpu_per_user.png", lambda p: save_png(per_gpu_per_user_plot(frame, context=context), p))
    params = frame.attrs.get("params", [])
    fraction = fraction_param(params, data.space_text)
    if fraction is not None:
        figure = metric_vs_param_plot(frame, fraction, context=context)
        save("mem_fraction.png", lambda p: save_png(figure, p))
    with stores(url, create=False) as store:
        rows = [r for n in front if (r := data.row_of(n)) is not None]
        requests = requests_frame(store, list({r.id: r for r in rows}.values()))
    if not requests.empty:
        save("latency.png", lambda p: save_png(latency_plot(requests, context=context), p))
