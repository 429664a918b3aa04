"""PBT manager: decides when each policy is updated and applies exploit.py and explore.py.

Owned by the runner (main process); writes policy files, the lineage log (lineage.py) and
{exp_dir}/pbt/state.json, from which it resumes.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Collection, Optional

import numpy as np

from rl_pbt.logging.files import (
    atomic_write,
    atomic_write_json,
    pbt_dir,
    policy_cfg_path,
    policy_shaping_path,
    read_json,
)
from rl_pbt.pbt.exploit import (
    MIN_EPISODES_TO_RANK,
    ExploitSettings,
    choose_source,
    mean_objectives,
    tie_order,
)
from rl_pbt.pbt.explore import ExploreSettings, explore, resample_value
from rl_pbt.pbt.lineage import append_event, lineage_path, make_event, read_events
from rl_pbt.pbt.search_space import (
    build_search_space,
    diff_values,
    flatten_shaping,
    fmt_value,
    is_shaping_key,
    load_search_space_file,
    unflatten_shaping,
)
from rl_pbt.sampling.elo import expected_score

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
STATE_VERSION = 1
_STATE_KEYS = {"num_policies", "hparams", "shaping_flat", "last_update", "windows", "rng"}


class PBTStateError(ValueError):
    """pbt/state.json cannot be restored nor rebuilt."""


@dataclass
class PBTDecision:
    policy_id: int
    source_id: Optional[int]  # copy weights+optimiser+normaliser+hparams+shaping first, or None
    hparams: dict[str, float]  # the complete new learning hyperparameters, applied AFTER a copy
    shaping: Optional[dict]  # the complete new nested reward shaping, or None without shaping
    log_line: str
    # what `cancel` needs: the member's values and record before, and the lineage event
    undo: Optional[tuple] = field(default=None, repr=False, compare=False)


def elo_objectives(ratings: list[float]) -> list[float]:
    """Ratings as objectives: each policy's expected score against a player rated at the
    population's mean. Win-rate units (0..1, like true_objective), so the relative replacement
    gap means the same at any rating level; a raw rating's gap would depend on Elo's arbitrary
    offset (10% of 1200 is 120 points, 10% of 2000 is 200)."""
    mean = float(np.mean(ratings))
    return [expected_score(float(r), mean) for r in ratings]


def _plain(v: Any) -> Any:
    """numpy scalars to Python ones, so every value is JSON friendly."""
    return v.item() if isinstance(v, np.generic) else v


def search_space_of(cfg: Any, default_hparams: dict[str, float], default_shaping: Optional[dict]):
    """(starting learning values, flat starting shaping, the search-space file's entries, the
    search space, notes on it) of a population: ValueError naming the entry when the file and
    the env do not fit. Reads files only (the runner checks a run's PBT with it before it
    writes anything)."""
    base_shaping = flatten_shaping(default_shaping) if default_shaping is not None else None
    base_hparams = {k: _plain(v) for k, v in default_hparams.items()}
    overrides = load_search_space_file(getattr(cfg, "pbt_search_space", None))
    if getattr(cfg, "pbt_optimize_gamma", False) and "gamma" not in base_hparams:
        base_hparams["gamma"] = float(cfg.gamma)
    for name, spec in overrides.items():  # extra learning parameters named by the file
        has_value = is_shaping_key(name) or name in base_hparams
        if has_value and spec.default is not None:
            where = "the env's reward shaping" if is_shaping_key(name) else f"--{name}"
            raise ValueError(
                f"search space entry {name!r}: 'default' gives a starting value only to a "
                f"parameter the run does not have; {name} starts at {where}'s value (set "
                f"that instead, or --policy_values for values per member)"
            )
        if has_value or not spec.tuned:
            continue
        value = getattr(cfg, name, None) if spec.default is None else spec.default
        if value is None:
            raise ValueError(
                f"search space entry {name!r}: no starting value (not a passed "
                f"hyperparameter nor a flag; give it a 'default')"
            )
        base_hparams[name] = _plain(value)
    space, notes = build_search_space(
        base_hparams, base_shaping, bool(getattr(cfg, "pbt_optimize_gamma", False)), overrides
    )
    return base_hparams, base_shaping, overrides, space, notes


class PBTManager:
    """Population state and the PBT loop. See update() for when a policy gets a decision.

    Decisions of one update() must be applied in list order: a later decision may copy from a
    policy that an earlier one just changed.
    """

    def __init__(
        self,
        cfg: Any,
        num_policies: int,
        default_hparams: dict[str, float],
        default_shaping: Optional[dict],
        exp_dir: str,
        seed: Optional[int] = None,
        initial_values: Optional[list[dict[str, float]]] = None,
    ):
        if num_policies < 1:
            raise ValueError(f"PBT needs at least one policy, got num_policies={num_policies}")
        self.cfg = cfg
        self.num_policies = num_policies
        self.exp_dir = exp_dir
        self.shaping_template = copy.deepcopy(default_shaping)
        self.elo = getattr(cfg, "pbt_target_objective", "true_objective") == "elo"
        self.exploit_settings = ExploitSettings.from_cfg(cfg)
        if self.elo and self.exploit_settings.strategy == "ttest":
            log.warning(
                "PBT: the t-test needs episode objectives, not ratings; ranking on Elo "
                "ratings uses the tournament exploit instead"
            )
            self.exploit_settings = replace(self.exploit_settings, strategy="tournament")
        self.explore_settings = ExploreSettings.from_cfg(cfg)
        self.window = int(getattr(cfg, "pbt_objective_window", 100))
        need = 1 if self.elo else min(MIN_EPISODES_TO_RANK, self.window)
        self.exploit_settings = replace(self.exploit_settings, min_episodes=need)
        self.period = int(cfg.pbt_period_env_steps)
        self.start = int(cfg.pbt_start_mutation)
        # a member past this has trained its whole budget: a decision would change nothing it
        # trains, and a re-run with nothing left to train must leave the state as it found it
        self.budget = getattr(cfg, "train_for_env_steps", None)
        self.mutate_reference = bool(getattr(cfg, "pbt_mutate_reference_policy", False))

        base_hparams, base_shaping, overrides, self.space, notes = search_space_of(
            cfg, default_hparams, default_shaping
        )

        self.hparams: list[dict[str, Any]] = []
        self._shaping_flat: list[Optional[dict[str, float]]] = []
        self.shaping: list[Optional[dict]] = []
        self.last_update: list[int] = []
        self._windows: list[deque] = []
        self.rng = np.random.default_rng(seed if seed is not None else getattr(cfg, "seed", None))
        self.rebuilt_note: Optional[str] = None
        # lineage events that state.json accounts for: the file may hold more, appended by a
        # PBT step whose state was never saved (a crash between the two); they are dropped
        self.lineage_events = 0
        self._events: list[dict] = []  # made by the update under way, written at its end

        state = self._read_state(base_hparams, base_shaping)
        self.restored = state is not None  # a resumed run: its own values hold
        if self.restored:
            self._restore(state, base_hparams, base_shaping)
            self._write_policy_files(range(num_policies))
            self._drop_uncommitted_events(state.get("lineage_events"))
        else:
            for _ in range(num_policies):
                self.hparams.append(dict(base_hparams))
                self._shaping_flat.append(None if base_shaping is None else dict(base_shaping))
                self.last_update.append(0)
                self._windows.append(deque(maxlen=self.window))
            if initial_values is not None:
                self._set_initial_values(initial_values)
            if getattr(cfg, "pbt_init_random", False):  # after: it spreads the tuned values
                self._init_random()
            self._refresh_shaping()
            self._write_policy_files(range(num_policies))
            self._commit(
                [
                    make_event(p, "init", 0, {k: [None, v] for k, v in self._values(p).items()})
                    for p in range(num_policies)
                ]
            )
        notes += self._fit_bounds_to_members(overrides)
        self.space_notes = notes  # worth one console line each (the runner prints them)
        for note in notes:
            log.info("PBT search space: %s", note)

    def _fit_bounds_to_members(self, overrides: dict) -> list[str]:
        """Members may hold values the defaults do not (--policy_values starts, or such a
        start restored): built-in bounds stretch to include them, as they do for the defaults;
        a bound given in the search-space file is kept, with a note naming who starts outside."""
        notes = []
        for name, spec in list(self.space.items()):
            held = {p: self._values(p).get(name) for p in range(self.num_policies)}
            outside = [p for p, v in held.items() if v is not None and not spec.contains(v)]
            if not outside:
                continue
            if name in overrides:
                who = ", ".join(f"p{p}" for p in outside)
                notes.append(f"{name} of {who} starts outside its search space; explore clips it")
                continue
            for p in outside:
                spec = spec.widened_to(float(held[p]))
            self.space[name] = spec
        return notes

    def _set_initial_values(self, initial_values: list[dict[str, float]]) -> None:
        """Members start from their own values (--policy_values): learning values and flat
        shaping leaves that replace the defaults, one dict per policy."""
        if len(initial_values) != self.num_policies:
            raise ValueError(
                f"{len(initial_values)} sets of starting values for {self.num_policies} policies"
            )
        for p, values in enumerate(initial_values):
            for name, value in values.items():
                target = self._shaping_flat[p] if is_shaping_key(name) else self.hparams[p]
                if target is None or name not in target:
                    raise ValueError(f"policy {p}: {name!r} is not a tuned value or shaping leaf")
                target[name] = value

    def _init_random(self) -> None:
        """Spread the starting population over the prior: every member but the reference
        draws each tuned value from the search space (random search, when never updated).
        With --policy_values the members' values that are not tuned stay as that file gives
        them, and the reference keeps all of its own."""
        first = 0 if self.mutate_reference else 1
        for p in range(first, self.num_policies):
            for name, spec in self.space.items():
                target = self.hparams[p] if name in self.hparams[p] else self._shaping_flat[p]
                if target is None or name not in target:
                    continue
                target[name], _ = resample_value(
                    spec, target[name], self.rng, self.explore_settings
                )

    # ------------------------------------------------------------ paths and persistence

    @property
    def state_path(self) -> str:
        return os.path.join(pbt_dir(self.exp_dir), STATE_FILE)

    @property
    def lineage_path(self) -> str:
        return lineage_path(self.exp_dir)

    def save(self) -> None:
        """Write {exp_dir}/pbt/state.json atomically (values, last updates, windows, rng, how
        many lineage events it accounts for)."""
        atomic_write_json(
            self.state_path,
            {
                "version": STATE_VERSION,
                "num_policies": self.num_policies,
                "hparams": self.hparams,
                "shaping_flat": self._shaping_flat,
                "last_update": self.last_update,
                "windows": [list(w) for w in self._windows],
                "rng": self.rng.bit_generator.state,
                "lineage_events": self.lineage_events,
            },
        )

    def _commit(self, events: list[dict]) -> None:
        """A PBT step's lineage events, then the state that accounts for them: state.json is
        the step's commit point (see `_drop_uncommitted_events`)."""
        for event in events:
            append_event(self.lineage_path, event)
        self.lineage_events += len(events)
        self.save()

    def _drop_uncommitted_events(self, committed: Optional[int]) -> None:
        """Events past the `committed` count of state.json come from a step whose state was
        never saved: the resumed run takes that step again, so they would be there twice."""
        events = read_events(self.lineage_path)
        if committed is None or len(events) <= committed:  # a state.json from before the count
            self.lineage_events = len(events)
            return
        log.warning(
            "%s: %d event(s) of a PBT step that was not saved (the run stopped in between) dropped",
            self.lineage_path,
            len(events) - committed,
        )
        kept = events[:committed]
        atomic_write(
            self.lineage_path,
            lambda f: f.write("".join(json.dumps(e, sort_keys=True) + "\n" for e in kept)),
        )
        self.lineage_events = committed

    def _memory(self) -> tuple:
        return copy.deepcopy(
            (self.hparams, self._shaping_flat, self.last_update, self._windows)
        ) + (self.rng.bit_generator.state, self.lineage_events)

    def _recall(self, memory: tuple) -> None:
        self.hparams, self._shaping_flat, self.last_update, self._windows = memory[:4]
        self.rng.bit_generator.state = memory[4]
        self.lineage_events = memory[5]
        self._refresh_shaping()

    def _read_state(
        self, base_hparams: dict[str, Any], base_shaping: Optional[dict[str, float]]
    ) -> Optional[dict]:
        """The saved state; None for a new run. A missing or unreadable state.json of a run
        that already has a lineage is rebuilt from the policy files and the lineage (never a
        silent reset to the defaults), or stops the run with a line naming the file."""
        problem = None
        if os.path.isfile(self.state_path):
            try:
                state = read_json(self.state_path)
                if isinstance(state, dict) and _STATE_KEYS <= set(state):
                    return state
                problem = "does not hold a PBT state"
            except (OSError, ValueError) as e:  # json.JSONDecodeError is a ValueError
                problem = f"is unreadable ({e})"
        elif read_events(self.lineage_path):
            problem = "is missing"
        if problem is None:
            return None  # a new run
        state = self._rebuild_state(base_hparams, base_shaping)
        if state is None:
            raise PBTStateError(
                f"{self.state_path} {problem}, and the policy files needed to rebuild it "
                f"({policy_cfg_path(self.exp_dir, 0)}, ...) are not all there: restore the "
                "file, or start over with --restart_behavior=restart"
            )
        log.warning(
            "%s %s: rebuilt from the policy files and the lineage", self.state_path, problem
        )
        self.rebuilt_note = (
            f"{self.state_path} {problem}: rebuilt from the policy files and lineage"
        )
        return state

    def _rebuild_state(
        self, base_hparams: dict[str, Any], base_shaping: Optional[dict[str, float]]
    ) -> Optional[dict]:
        hparams, shaping = [], []
        for p in range(self.num_policies):
            try:
                hparams.append(read_json(policy_cfg_path(self.exp_dir, p)))
                flat = None
                if base_shaping is not None:
                    flat = flatten_shaping(read_json(policy_shaping_path(self.exp_dir, p)))
                shaping.append(flat)
            except (OSError, ValueError, TypeError, AttributeError):
                return None
            if not isinstance(hparams[-1], dict) or (base_shaping is not None and not flat):
                return None
        return {
            "num_policies": self.num_policies,
            "hparams": hparams,
            "shaping_flat": shaping,
            # unknown: each policy's next update counts a full period from where it resumes
            "last_update": [None] * self.num_policies,
            "windows": [[] for _ in range(self.num_policies)],
            "rng": None,
        }

    def _restore(
        self, state: dict, base_hparams: dict[str, Any], base_shaping: Optional[dict[str, float]]
    ) -> None:
        """Saved values win; parameters the saved state lacks start from the defaults, and
        shaping leaves the env no longer has are dropped."""
        if state.get("num_policies") != self.num_policies:
            raise ValueError(
                f"{self.state_path} holds PBT state for {state.get('num_policies')} policies, "
                f"this run has {self.num_policies}; use a new experiment or restart_behavior"
            )
        self.hparams = [{**base_hparams, **h} for h in state["hparams"]]
        self._shaping_flat = [
            None
            if base_shaping is None
            else {k: (saved or {}).get(k, v) for k, v in base_shaping.items()}
            for saved in state["shaping_flat"]
        ]
        self.last_update = [None if v is None else int(v) for v in state["last_update"]]
        self._windows = [deque(w, maxlen=self.window) for w in state["windows"]]
        if state["rng"] is not None:
            self.rng.bit_generator.state = state["rng"]
        self._refresh_shaping()

    def _refresh_shaping(self) -> None:
        self.shaping = [
            None if flat is None else unflatten_shaping(flat, self.shaping_template)
            for flat in self._shaping_flat
        ]

    def _write_policy_files(self, policies) -> None:
        for p in policies:
            atomic_write_json(policy_cfg_path(self.exp_dir, p), self.hparams[p])
            if self.shaping[p] is not None:
                atomic_write_json(policy_shaping_path(self.exp_dir, p), self.shaping[p])

    def _values(self, p: int) -> dict[str, Any]:
        return {**self.hparams[p], **(self._shaping_flat[p] or {})}

    # ------------------------------------------------------------ objectives

    def record_episode(self, policy_id: int, objective: float) -> None:
        """Add one finished episode's objective to the policy's window (non-finite ignored)."""
        value = float(objective)
        if math.isfinite(value):
            self._windows[policy_id].append(value)

    def objectives(self) -> dict[int, Optional[float]]:
        """Mean objective over each policy's window; None where it has no episodes."""
        return {p: (float(np.mean(w)) if len(w) else None) for p, w in enumerate(self._windows)}

    def ranked_objectives(self) -> dict[int, Optional[float]]:
        """The objectives PBT ranks members on: None where a window is shorter than a member
        needs to be ranked (one game won right after a copy is no best member)."""
        windows = {p: list(w) for p, w in enumerate(self._windows)}
        return mean_objectives(windows, self.exploit_settings.min_episodes)

    # ------------------------------------------------------------ the PBT step

    def update(
        self,
        env_steps: list[int],
        ratings: Optional[list[float]] = None,
        copying: Collection[int] = (),
        no_source: Collection[int] = (),
    ) -> list[PBTDecision]:
        """Decisions for every policy that is due, in the order they must be applied.

        Due: env_steps[p] - last_update[p] >= pbt_period_env_steps, p has not trained its whole
        budget (train_for_env_steps) and the whole population is past pbt_start_mutation. Only
        policies whose weights or values change get a decision; every due policy's last update
        moves to its current env steps. After a resume the restored last updates hold, so a
        restart alone never triggers a step. `copying`: members whose earlier copy has not
        landed yet (their weights are still the old ones): not a source. `no_source`: members
        ranked as usual whose weights cannot be handed over now (over Ray: a node group that
        has finished its budget and stopped): not a source either.
        """
        if len(env_steps) != self.num_policies:
            raise ValueError(
                f"update() got {len(env_steps)} env step counts for {self.num_policies} policies"
            )
        if self.elo and (ratings is None or len(ratings) != self.num_policies):
            raise ValueError("pbt_target_objective='elo' needs one rating per policy")
        steps = [int(s) for s in env_steps]
        for p, last in enumerate(self.last_update):
            # rebuilt state: a period counts from the first steps seen. 0 is what the runner
            # holds before a resumed learner has reported: not yet a count to start from
            if last is None and steps[p] > 0:
                self.last_update[p] = steps[p]
        if min(steps) < self.start:
            return []
        due = [
            p
            for p in range(self.num_policies)
            if self.last_update[p] is not None
            and steps[p] - self.last_update[p] >= self.period
            and (self.budget is None or steps[p] < self.budget)
            # not judged before it has played enough: it waits, its period not spent
            and (self.elo or len(self._windows[p]) >= self.exploit_settings.min_episodes)
            # its last copy has not landed: judged once it plays with the copied weights
            and p not in copying
        ]
        if not due:
            return []
        # all or nothing: a step that fails half way (a full disk) leaves the state it found,
        # in memory and on disk
        memory = self._memory()
        lineage_size = (
            os.path.getsize(self.lineage_path) if os.path.isfile(self.lineage_path) else 0
        )
        try:
            self._events = []
            decisions = []
            # their new weights do not exist yet, or cannot be had: no source
            replaced = set(copying) | set(no_source)
            # one ranking for the whole step, as the step began: members replaced earlier in
            # it keep their places (else the ranking shrinks as the step goes on, and members
            # from the middle, even the top, fall into the bottom and copy too)
            table = self._table(ratings)
            for q in copying:  # in flight: no record of the weights they will have
                table[q] = []
            ties = tie_order(self.num_policies, self.rng)
            for p in due:
                decision = self._update_policy(p, steps, table, ties, replaced)
                self.last_update[p] = steps[p]
                if decision is not None:
                    decisions.append(decision)
                    if decision.source_id is not None:
                        replaced.add(p)
            self._commit(self._events)
        except BaseException:
            self._recall(memory)
            self._undo_files(lineage_size)
            raise
        finally:
            self._events = []
        return decisions

    def _undo_files(self, lineage_size: int) -> None:
        """After a failed step: the lineage cut back to its size before the step, the policy
        files rewritten with the recalled values (a resume would mend them too, but a step
        tried again must not find the failed one's lines)."""
        try:
            if (
                os.path.isfile(self.lineage_path)
                and os.path.getsize(self.lineage_path) > lineage_size
            ):
                os.truncate(self.lineage_path, lineage_size)
            self._write_policy_files(range(self.num_policies))
        except OSError as e:  # the disk that failed the step may fail this too
            log.warning("after a failed PBT step, the files could not be set back: %s", e)

    def _table(self, ratings: Optional[list[float]]) -> dict[int, list[float]]:
        if self.elo:
            return {p: [v] for p, v in enumerate(elo_objectives(ratings))}
        return {p: list(w) for p, w in enumerate(self._windows)}

    def _update_policy(
        self,
        p: int,
        all_steps: list[int],
        table: dict[int, list[float]],
        ties: dict[int, int],
        replaced: Collection[int] = (),
    ) -> Optional[PBTDecision]:
        """Member p's decision in a step ranked on `table` with `ties`. `replaced`: members
        replaced earlier in this step (or whose copy is in flight): their learners have not
        imported the copied weights yet, so an export from one now would hand over the old
        ones: no source."""
        steps = all_steps[p]
        if p == 0 and not self.mutate_reference:
            return None  # the reference policy keeps its values and weights
        means = {q: (float(np.mean(v)) if v else None) for q, v in table.items()}
        result = choose_source(p, table, self.exploit_settings, self.rng, replaced, ties)
        src = result.source

        old = self._values(p)
        base_h = dict(self.hparams[src if src is not None else p])
        flat_src = self._shaping_flat[src if src is not None else p]
        base_s = None if flat_src is None else dict(flat_src)
        ops: list[str] = []
        values = {**base_h, **(base_s or {})}
        if result.explore:
            values, ops = explore(values, self.space, self.rng, self.explore_settings)
        new_h = {k: _plain(values[k]) for k in base_h}
        new_s = None if base_s is None else {k: _plain(values[k]) for k in base_s}
        changes = diff_values(old, {**new_h, **(new_s or {})})
        if src is None and not changes:
            return None

        before = copy.deepcopy((self.hparams[p], self._shaping_flat[p], list(self._windows[p])))
        self.hparams[p] = new_h
        self._shaping_flat[p] = new_s
        self._refresh_shaping()
        if src is not None:
            self._windows[p].clear()  # the copied weights start a fresh objective record
        self._write_policy_files([p])
        self._events.append(
            make_event(
                p,
                "replace" if src is not None else "mutate",
                steps,
                changes,
                source=src,
                objectives=means,
                reason=result.reason,
                source_env_steps=None if src is None else all_steps[src],
            ),
        )

        own = means.get(p)
        if src is not None:
            head = f"PBT p{p} <- p{src} (obj {fmt_value(own)} vs {fmt_value(means.get(src))})"
        else:
            head = f"PBT p{p} mutate (obj {fmt_value(own) if own is not None else 'n/a'})"
        line = f"{head}: {', '.join(ops)}" if ops else f"{head}: no mutation"
        undo = (*before, copy.deepcopy(self._events[-1]))
        return PBTDecision(p, src, dict(new_h), copy.deepcopy(self.shaping[p]), line, undo)

    def cancel(self, decision: PBTDecision) -> None:
        """A decision of the last step that could not be carried out (over Ray: the target's
        node group died in the middle of it): the member gets back its values and objective
        record, and its event leaves the lineage, so that the lineage, a replay of it and the
        family tree hold only what happened. Its period stays spent: it is judged again at its
        next one."""
        p = decision.policy_id
        hparams, shaping_flat, window, event = decision.undo
        self.hparams[p], self._shaping_flat[p] = dict(hparams), copy.deepcopy(shaping_flat)
        self._windows[p].clear()
        self._windows[p].extend(window)
        self._refresh_shaping()
        wanted = json.dumps(event, sort_keys=True)
        events = read_events(self.lineage_path)
        for i in range(len(events) - 1, -1, -1):
            if json.dumps(events[i], sort_keys=True) == wanted:
                del events[i]
                self.lineage_events -= 1
                break
        atomic_write(
            self.lineage_path,
            lambda f: f.write("".join(json.dumps(e, sort_keys=True) + "\n" for e in events)),
        )
        self._write_policy_files([p])
        self.save()
