"""Population Based Training: manager (when), exploit (who), explore (how), search space, lineage.

The runner owns one PBTManager; the other modules are pure helpers it and tools use.
"""

from rl_pbt.pbt.exploit import ExploitResult, ExploitSettings, choose_source, welch_ttest
from rl_pbt.pbt.explore import ExploreSettings, explore
from rl_pbt.pbt.lineage import (
    append_event,
    family_tree_dot,
    family_tree_text,
    lineage_path,
    read_events,
    schedule_for,
)
from rl_pbt.pbt.manager import PBTDecision, PBTManager
from rl_pbt.pbt.search_space import (
    ParamSpec,
    build_search_space,
    flatten_shaping,
    load_search_space_file,
    unflatten_shaping,
)

__all__ = [
    "PBTDecision",
    "PBTManager",
    "ExploitResult",
    "ExploitSettings",
    "choose_source",
    "welch_ttest",
    "ExploreSettings",
    "explore",
    "ParamSpec",
    "build_search_space",
    "flatten_shaping",
    "unflatten_shaping",
    "load_search_space_file",
    "append_event",
    "read_events",
    "schedule_for",
    "family_tree_dot",
    "family_tree_text",
    "lineage_path",
]
