"""The experiment contract: what a reproduction declares and what it returns.

A reproduction is a function ``reproduce(cfg, ctx) -> Result`` registered with
:func:`experiment`. ``cfg`` is a dataclass instance chosen by preset (``smoke``,
``quick``, ``paper``) and optionally overridden field by field (``--set k=v``);
``ctx`` is the :class:`RunContext` the runner hands in (seed, log, progress, run
folder). The function returns a :class:`Result` whose claims compare the paper's
statement with what this run measured.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

from iclr24.core.evidence import Evidence

__all__ = [
    "PRESETS",
    "PROVENANCES",
    "SUBJECTS",
    "Check",
    "Claim",
    "Experiment",
    "Result",
    "RunContext",
    "apply_overrides",
    "experiment",
    "get_experiment",
    "list_experiments",
]

#: Preset names, in increasing cost. ``smoke`` runs in seconds (the tests use it),
#: ``quick`` is the default (at most ~3 minutes on 2 CPU cores), ``paper`` is the
#: paper's scale and may want a GPU.
PRESETS = ("smoke", "quick", "paper")



#: Where a claim's margin (or bar) came from: the paper's own number, the spec written before the method first
#: ran, or a revision made after results were seen (its reason recorded, and the claim also judged under the
#: first definition where that revision made it hold).
PROVENANCES = ("paper", "spec", "revised")
#: What a claim's evidence is about: the paper's subject, or a stand-in for it (a simulated model, the embedded
#: 135M model for a GPT-4 claim, a toy task at ceiling), tallied apart.
SUBJECTS = ("paper", "stand-in")


@dataclass(frozen=True)
class Claim:
    """One of the paper's claims, judged from this run's measurements.

    Parameters
    ----------
    statement : str
        The paper's claim in words, e.g. ``"faster than exact attention at long context"``.
    paper : str
        The paper's own number and setting, e.g. ``"5x at n=131k, causal, A100"``.
    measured : str
        What this run measured, in the same terms, e.g. ``"2.4x at n=32k, causal, CPU"``.
    evidence : Evidence
        The statistic the verdict rests on, built by :mod:`iclr24.core.evidence` (``compare``, ``against``,
        ``ratio``, ``all_of``, ``given``, or ``not_run`` with a reason). The verdict is the evidence's: a claim
        cannot be given one by hand.
    criterion : str
        The test in words, stated before looking at the result; by default the evidence's own rule.
    provenance : str
        Where the margin came from: ``"paper"``, ``"spec"`` (set before the method first ran) or ``"revised"``
        (changed with results in view; ``revision`` says why). Empty means not recorded, which the report flags.
    revision : str
        For ``provenance="revised"``: what changed and why, in one line.
    original : Evidence or None
        For a revised claim: the same measurements judged under the first definition, shown beside the verdict
        (it does not decide).
    subject : str
        ``"paper"``, or ``"stand-in"`` when the evidence is about something standing in for the paper's subject
        (a simulated model, a small model for a large one's claim, a toy task); tallied apart.
    stand_in : str
        For ``subject="stand-in"``: what stands in for what, in one line.

    Attributes
    ----------
    verdict : str
        ``"holds"``, ``"fails"``, ``"inconclusive"`` or ``"not run"``.
    holds : bool
        ``verdict == "holds"`` (for readers of the boolean).
    """

    statement: str
    paper: str
    measured: str
    evidence: Evidence
    criterion: str = ""
    provenance: str = ""
    revision: str = ""
    original: Evidence | None = None
    subject: str = "paper"
    stand_in: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.evidence, Evidence):
            raise TypeError(f"Claim.evidence must be an Evidence from iclr24.core.evidence (compare, against, "
                            f"ratio, all_of, given, not_run), got {self.evidence!r}")
        for name in ("statement", "paper", "measured", "criterion", "revision", "stand_in"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Claim.{name} must be a str, got {getattr(self, name)!r}")
        if self.provenance not in ("", *PROVENANCES):
            raise ValueError(f"Claim.provenance must be one of {PROVENANCES}, got {self.provenance!r}")
        if (self.provenance == "revised") != bool(self.revision.strip()):
            raise ValueError("Claim.revision states why a margin was revised: give it exactly when "
                             f"provenance='revised' (claim {self.statement!r})")
        if self.original is not None and not isinstance(self.original, Evidence):
            raise TypeError(f"Claim.original must be an Evidence, got {self.original!r}")
        if self.original is not None and self.provenance != "revised":
            raise ValueError(f"Claim.original is the verdict under a revised claim's first definition; claim "
                             f"{self.statement!r} is not revised")
        if self.subject not in SUBJECTS:
            raise ValueError(f"Claim.subject must be one of {SUBJECTS}, got {self.subject!r}")
        if (self.subject == "stand-in") != bool(self.stand_in.strip()):
            raise ValueError("Claim.stand_in says what stands in for the paper's subject: give it exactly when "
                             f"subject='stand-in' (claim {self.statement!r})")
        if not self.criterion:
            object.__setattr__(self, "criterion", self.evidence.criterion)

    @property
    def verdict(self) -> str:
        return self.evidence.verdict

    @property
    def holds(self) -> bool:
        return self.evidence.verdict == "holds"

    def as_stand_in(self, reason: str) -> Claim:
        """The same claim, marked as measured on a stand-in (``reason``: what stands in for what)."""
        return dataclasses.replace(self, subject="stand-in", stand_in=reason)

    def to_dict(self) -> dict[str, Any]:
        return {"statement": self.statement, "paper": self.paper, "measured": self.measured,
                "criterion": self.criterion, "verdict": self.verdict, "holds": self.holds,
                "evidence": self.evidence.to_dict(), "provenance": self.provenance, "revision": self.revision,
                "original": self.original.to_dict() if self.original is not None else None,
                "subject": self.subject, "stand_in": self.stand_in}


@dataclass(frozen=True)
class Check:
    """A sanity check: a fact the code guarantees (an invariant, an identity), shown apart from the claims.

    A check that holds by construction is not evidence for the paper; one that fails means a bug.
    """

    statement: str
    passed: bool
    detail: str = ""

    def __post_init__(self) -> None:
        passed = self.passed.item() if hasattr(self.passed, "item") else self.passed
        if not isinstance(passed, bool):
            raise TypeError(f"Check.passed must be a bool, got {self.passed!r}")
        object.__setattr__(self, "passed", passed)
        for name in ("statement", "detail"):
            if not isinstance(getattr(self, name), str):
                raise TypeError(f"Check.{name} must be a str, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Result:
    """What a reproduction returns.

    Parameters
    ----------
    metrics : dict of str to float
        Deterministic measurements: the same seed and preset give the same values.
    claims : list of Claim
        The paper's claims, each with the measured value and its verdict (from the evidence).
    timings : dict of str to float
        Wall-clock measurements (seconds or ratios of them). They depend on the
        machine and its load, so they are kept apart from ``metrics`` and are not
        covered by the determinism guarantee.
    figures : dict of str to matplotlib Figure
        Saved as PNG under the run folder, by file name (``"speedup.png"``).
    tables : dict of str to list of dict
        Row-wise tables (``{"speedup": [{"n": 4096, "ratio": 1.2}, ...]}``), saved as
        JSON and shown in the report.
    notes : str
        Free text shown in the report under the method's table (scale, caveats).
    checks : list of Check
        Sanity checks (facts true by construction), shown apart from the claims.
    """

    metrics: dict[str, float]
    claims: list[Claim]
    timings: dict[str, float] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    notes: str = ""
    checks: list[Check] = field(default_factory=list)

    def __post_init__(self) -> None:
        for kind in ("metrics", "timings"):
            values = getattr(self, kind)
            if not isinstance(values, Mapping):
                raise TypeError(f"Result.{kind} must be a dict of str to float, got {type(values).__name__}")
            clean = {}
            for key, value in values.items():
                try:
                    clean[str(key)] = float(value)
                except (TypeError, ValueError):
                    raise TypeError(f"Result.{kind}[{key!r}] must be a number, got {value!r}") from None
            setattr(self, kind, clean)
        for claim in self.claims:
            if not isinstance(claim, Claim):
                raise TypeError(f"Result.claims must hold Claim objects, got {claim!r}")
        for check in self.checks:
            if not isinstance(check, Check):
                raise TypeError(f"Result.checks must hold Check objects, got {check!r}")
        for name in self.figures:
            if not name.endswith(".png") or "/" in name or name.startswith("."):
                raise ValueError(f"figure names must be plain '*.png' file names, got {name!r}")


@dataclass
class RunContext:
    """What the runner gives a reproduction.

    Attributes
    ----------
    seed : int
        The run's seed; python, numpy and torch are already seeded with it.
    preset : str
        The preset name the config came from.
    run_dir : Path
        The run's (temporary) folder. Write extra artefacts with :meth:`path`.
    quiet : bool
        True when progress and log lines should not be printed.
    """

    seed: int
    preset: str
    run_dir: Path
    quiet: bool = False
    _log: Callable[[str], None] = print

    def log(self, message: str) -> None:
        """Write a line to the run's log.txt (and to the console unless quiet)."""
        self._log(message)

    def replicate_seeds(self, n: int) -> list[int]:
        """The seeds of this run's ``n`` replicates: ``seed * n + i``.

        Seed 0 gives 0..n-1; runs with seeds 0, 1, 2, ... of one seed group get disjoint blocks, so pooling their
        replicates (``iclr24 run --seeds``) never counts one replicate twice.
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an int >= 1, got {n!r}")
        return [(self.seed * n + i) % 2**32 for i in range(n)]  # the seed range every library takes

    def path(self, name: str) -> Path:
        """A path for an artefact inside the run folder (``artifacts/<name>``).

        Artefacts are kept only if the run completes.
        """
        if not name or Path(name).is_absolute() or ".." in Path(name).parts:
            raise ValueError(f"artefact name must be a relative path inside the run folder, got {name!r}")
        target = self.run_dir / "artifacts" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def progress(self, description: str, total: int | None = None):
        """A progress bar (see :func:`iclr24.core.progress.progress`)."""
        from iclr24.core.progress import progress

        return progress(description, total=total)


@dataclass(frozen=True)
class Experiment:
    """A registered reproduction: name, paper, presets and the function to run."""

    name: str
    paper: str
    presets: Mapping[str, Any]
    fn: Callable[[Any, RunContext], Result]
    claims: tuple[str, ...] = ()
    description: str = ""
    default_preset: str = "quick"
    num_cpus: int = 1  # the cores one run uses: what a Ray task asks for (--executor ray)
    runs_alone: bool = False  # its claims time wall-clock: `run all` runs it with nothing beside it
    timed_claims: tuple[str, ...] = ()  # the claims judged on wall-clock: their verdicts may vary run to run

    @property
    def config_class(self) -> type:
        return type(next(iter(self.presets.values())))

    def config(self, preset: str = "quick", overrides: Sequence[str] | Mapping[str, Any] = ()) -> Any:
        """The config for ``preset`` with ``overrides`` (``["key=value", ...]`` or a dict) applied."""
        if preset not in self.presets:
            raise ValueError(
                f"unknown preset {preset!r} for experiment {self.name!r}; expected one of {sorted(self.presets)}"
            )
        return apply_overrides(self.presets[preset], overrides, where=f"experiment {self.name!r}")

    def __call__(self, cfg: Any, ctx: RunContext) -> Result:
        return self.fn(cfg, ctx)


_REGISTRY: dict[str, Experiment] = {}


def experiment(
    *,
    name: str,
    paper: str,
    presets: Mapping[str, Any],
    claims: Sequence[str] = (),
    description: str = "",
    num_cpus: int = 1,
    runs_alone: bool = False,
    timed_claims: Sequence[str] = (),
) -> Callable[[Callable[[Any, RunContext], Result]], Experiment]:
    """Register a reproduction under ``name``.

    Parameters
    ----------
    name : str
        The method's package name (``"hyperattention"``), used on the command line.
    paper : str
        The paper's title and venue.
    presets : dict of str to dataclass instance
        At least ``"smoke"`` and ``"quick"``; optionally ``"paper"``. All presets are
        instances of the same dataclass.
    claims : sequence of str
        The statements of the claims the reproduction checks. Declared up front so
        ``iclr24 list`` can show them before a run, and checked after it: a run
        that does not report every declared claim fails.
    description : str
        One line shown by ``iclr24 list``.
    num_cpus : int
        The cores one run keeps busy; a Ray task asks for this many (default 1).
    runs_alone : bool
        The claims time wall-clock (a speed-up): ``run all`` runs this experiment after the others, with nothing
        beside it, so the timings are not shared with another run's load.
    timed_claims : sequence of str
        The claims (among ``claims``) judged on wall-clock times. Every other verdict is a function of the seed
        and preset; these also depend on the machine's load, so tests of determinism leave them out.

    Examples
    --------
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Config:
    ...     n: int = 8
    >>> @experiment(name="doc-example", paper="A paper (ICLR 2024)",
    ...             presets={"smoke": Config(2), "quick": Config()})
    ... def reproduce(cfg, ctx):
    ...     return Result(metrics={"n": cfg.n}, claims=[])
    >>> get_experiment("doc-example").config("smoke", ["n=3"])
    Config(n=3)
    >>> _ = _REGISTRY.pop("doc-example")
    """
    if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"experiment name must be a non-empty identifier, got {name!r}")
    missing = [p for p in ("smoke", "quick") if p not in presets]
    unknown = [p for p in presets if p not in PRESETS]
    if missing or unknown:
        raise ValueError(
            f"experiment {name!r}: presets must include 'smoke' and 'quick' and be among {PRESETS}; "
            f"missing {missing}, unknown {unknown}"
        )
    if isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1:
        raise ValueError(f"experiment {name!r}: num_cpus must be an int >= 1, got {num_cpus!r}")
    if not set(timed_claims) <= set(claims):
        raise ValueError(f"experiment {name!r}: timed_claims must be among its claims, got "
                         f"{sorted(set(timed_claims) - set(claims))}")
    classes = {type(cfg) for cfg in presets.values()}
    if len(classes) != 1 or not dataclasses.is_dataclass(next(iter(classes))):
        raise TypeError(f"experiment {name!r}: presets must be instances of one dataclass, got {classes}")

    def register(fn: Callable[[Any, RunContext], Result]) -> Experiment:
        exp = Experiment(
            name=name,
            paper=paper,
            presets=dict(presets),
            fn=fn,
            claims=tuple(claims),
            description=description or _first_line(fn.__doc__),
            num_cpus=num_cpus,
            runs_alone=bool(runs_alone),
            timed_claims=tuple(timed_claims),
        )
        previous = _REGISTRY.get(name)
        # Re-importing the same module (importlib.reload, notebooks) re-registers the same
        # function; a different function under a taken name is a mistake.
        if previous is not None and _qualname(previous.fn) != _qualname(fn):
            raise ValueError(
                f"experiment name {name!r} is already registered by {_qualname(previous.fn)}; "
                f"cannot register {_qualname(fn)}"
            )
        _REGISTRY[name] = exp
        return exp

    return register


def get_experiment(name: str) -> Experiment:
    """The experiment registered as ``name``; a clear error lists the known names."""
    _load_methods()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "(none)"
        raise ValueError(f"unknown experiment {name!r}; known experiments: {known}") from None


def list_experiments() -> list[Experiment]:
    """All registered experiments, sorted by name."""
    _load_methods()
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def _load_methods() -> None:
    import importlib

    from iclr24.core.methods import METHOD_PACKAGES

    for package in METHOD_PACKAGES:
        importlib.import_module(f"iclr24.{package}.experiment")


def _qualname(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().splitlines()[0] if (doc or "").strip() else ""


# --- config overrides ---------------------------------------------------------------------------


def apply_overrides(cfg: Any, overrides: Sequence[str] | Mapping[str, Any], *, where: str = "config") -> Any:
    """Return a copy of dataclass ``cfg`` with fields replaced.

    ``overrides`` is either ``["key=value", ...]`` (strings parsed by each field's
    type: int, float, bool, str, Literal, Optional, tuple/list of these) or a
    dict of already-typed values (checked against the field types).
    """
    if isinstance(overrides, Mapping):
        items = list(overrides.items())
        from_text = False
    else:
        items = []
        for item in overrides:
            key, sep, text = str(item).partition("=")
            if not sep or not key.strip():
                raise ValueError(f"override {item!r} for {where} must look like key=value")
            items.append((key.strip(), text.strip()))
        from_text = True
    fields = {f.name: f for f in dataclasses.fields(cfg) if f.init}
    hints = typing.get_type_hints(type(cfg))
    changes = {}
    for key, value in items:
        if key not in fields:
            raise ValueError(f"unknown key {key!r} for {where}; known keys: {', '.join(fields)}")
        tp = hints[key]
        try:
            changes[key] = _parse(value, tp) if from_text else _check(value, tp)
        except (TypeError, ValueError) as err:
            raise ValueError(f"bad value for {key!r} in {where}: {value!r} ({err})") from None
    for key, value in changes.items():  # a path the user gives must exist, even where this preset never reads it
        if key.endswith(PATH_SUFFIXES) and isinstance(value, str) and value and not Path(value).exists():
            raise ValueError(f"{where}: {key}={value!r} does not exist")
    try:
        cfg = dataclasses.replace(cfg, **changes)
    except (TypeError, ValueError) as err:  # the config's own __post_init__ checks
        raise ValueError(f"invalid {where} after overrides {dict(changes)}: {err}") from None
    check_config_fields(cfg, where=where)
    return cfg


#: Config fields named like this hold a path (checked to exist when set with ``--set``).
PATH_SUFFIXES = ("_dir", "_path", "_file")
#: The largest int a config field may hold unless its class says otherwise (``maximum``): past it a run would
#: never end (the largest in any preset is 200,000).
MAX_INT_FIELD = 10**7


def check_config_fields(cfg: Any, *, where: str = "config") -> None:
    """The checks every experiment config gets, before a run starts (a config's ``__post_init__`` adds its own).

    Counts are ints >= 1 and <= :data:`MAX_INT_FIELD`, other numbers finite and >= 0, sequences non-empty. A config
    class sets other upper bounds with a class attribute ``maximum`` (a dict of field name to bound), and relaxes
    the rest for
    named fields with class attributes: ``allow_zero`` (ints that may be 0, e.g. "0 problems from this set"),
    ``allow_negative`` (numbers that may be negative, e.g. -1 meaning "the default layer") and
    ``allow_empty`` (sequences that may be empty).
    """
    allow_zero = set(getattr(cfg, "allow_zero", ()))
    allow_negative = set(getattr(cfg, "allow_negative", ()))
    allow_empty = set(getattr(cfg, "allow_empty", ()))
    maximum = dict(getattr(cfg, "maximum", {}))

    def check_number(name: str, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if not math.isfinite(value):
            raise ValueError(f"{where}: {name} must be finite, got {value}")
        cap = maximum.get(name, MAX_INT_FIELD if isinstance(value, int) else math.inf)
        if value > cap:
            raise ValueError(f"{where}: {name} must be <= {cap:g}, got {value:g}")
        if name in allow_negative:
            return
        if isinstance(value, int) and name not in allow_zero and value < 1:
            raise ValueError(f"{where}: {name} must be >= 1, got {value}")
        if value < 0:
            raise ValueError(f"{where}: {name} must be >= 0, got {value}")

    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, (tuple, list)):
            if not value and f.name not in allow_empty:
                raise ValueError(f"{where}: {f.name} must not be empty")
            for item in value:  # items may be indices or weights: 0 is fine, negatives are not
                if isinstance(item, (int, float)) and not isinstance(item, bool):
                    if not math.isfinite(item) or (item < 0 and f.name not in allow_negative):
                        raise ValueError(f"{where}: {f.name} must hold finite values >= 0, got {value}")
                    cap = maximum.get(f.name, MAX_INT_FIELD if isinstance(item, int) else math.inf)
                    if item > cap:
                        raise ValueError(f"{where}: {f.name} must hold values <= {cap:g}, got {item:g}")
        else:
            check_number(f.name, value)


def _parse(text: str, tp: Any) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        if text.lower() in ("none", "null") and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _parse(text, arg)
            except (TypeError, ValueError) as err:
                errors.append(str(err))
        raise ValueError("; ".join(errors))
    if origin is Literal:
        for arg in args:
            if str(arg) == text:
                return arg
        raise ValueError(f"expected one of {list(args)}")
    if origin in (tuple, list):
        parts = [p.strip() for p in text.strip("()[]").split(",") if p.strip()]
        inner = args[0] if args else str
        values = [_parse(p, inner) for p in parts]
        return tuple(values) if origin is tuple else values
    if tp is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes", "on"):
            return True
        if lowered in ("false", "0", "no", "off"):
            return False
        raise ValueError("expected a bool (true/false)")
    if tp is int:
        try:
            return int(text)
        except ValueError:
            raise ValueError("expected an int") from None
    if tp is float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError("expected a float") from None
        if not math.isfinite(value):
            raise ValueError("expected a finite float")
        return value
    if tp is str:
        return text
    raise TypeError(f"fields of type {tp} cannot be set from the command line")


def _check(value: Any, tp: Any) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (Union, types.UnionType):
        for arg in args:
            try:
                return _check(value, arg)
            except (TypeError, ValueError):
                continue
        raise TypeError(f"expected {tp}")
    if tp is type(None):
        if value is None:
            return None
        raise TypeError("expected None")
    if origin is Literal:
        if value in args:
            return value
        raise ValueError(f"expected one of {list(args)}")
    if origin in (tuple, list):
        if not isinstance(value, (tuple, list)):
            raise TypeError(f"expected a {origin.__name__}")
        inner = args[0] if args else Any
        values = [_check(v, inner) for v in value]
        return tuple(values) if origin is tuple else values
    if tp is Any:
        return value
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float) and isinstance(value, bool):
        raise TypeError(f"expected {tp.__name__}, got bool")
    if isinstance(tp, type) and not isinstance(value, tp):
        raise TypeError(f"expected {tp.__name__}, got {type(value).__name__}")
    return value
