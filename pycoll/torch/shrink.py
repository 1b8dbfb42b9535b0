"""`pycoll.torch.shrink_group`: torch's `torch.distributed.shrink_group` for groups on the pycoll backend.

torch 2.13's own shrink_group asks the group for its C++ `Backend` (`_get_backend(device)`), calls its `shrink()`
and registers the Backend that returns on a new C++ `ProcessGroup`. A Python backend cannot take part: pycoll's
group is a Python `ProcessGroup` subclass (torch's `Backend` has no Python constructor), so there is no Backend
to return. This function takes the same arguments and keeps the same rules -- torch's own checks, the same
bookkeeping (the default group shrunk becomes the new default, every other group destroyed) -- with a pycoll
group made over `Communicator.shrink` in place of the C++ one. A group of any other backend goes to torch's.
"""

from __future__ import annotations

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from pycoll.torch.process_group import PycollProcessGroup

SHRINK_DEFAULT = 0x00
SHRINK_ABORT = 0x01

# What torch's shrink_group is made of (torch >= 2.13); this function uses the same pieces.
_TORCH_PARTS = ("shrink_group", "_validate_shrink_inputs", "_prepare_shrink_target_group",
                "_validate_and_process_excluded_ranks", "_destroy_all_other_groups", "_extract_group_metadata",
                "_cleanup_original_group", "_update_default_pg", "_register_pg_in_world")


def shrink_group(ranks_to_exclude, group=None, shrink_flags=SHRINK_DEFAULT, pg_options=None):
    """A new group of `group`'s ranks (the default group when None) less `ranks_to_exclude` (ranks of `group`),
    as `torch.distributed.shrink_group`: called by every rank that stays, never by the excluded (dead or
    not). The survivors agree on who is gone; ranks pycoll finds lost are left out as well, so the new group
    may be smaller than asked (`dist.get_process_group_ranks(new)` says who is in it). Shrinking the default
    group makes the new group the default and destroys every other group (their ranks no longer hold).
    `shrink_flags=SHRINK_ABORT` revokes the group first, so that the survivors' pending collectives on it end
    at once. `pg_options`: the pycoll backend has none (the new group keeps the old one's timeout)."""
    missing = [name for name in _TORCH_PARTS if not hasattr(c10d, name)]
    if missing:
        raise NotImplementedError(f"pycoll.torch.shrink_group needs torch's shrink_group (torch 2.13 or later); "
                                  f"this torch lacks {', '.join(missing)}")
    c10d._validate_shrink_inputs(ranks_to_exclude, shrink_flags)
    info = c10d._prepare_shrink_target_group(group)
    old = info["process_group"]
    if not isinstance(old, PycollProcessGroup):
        return dist.shrink_group(ranks_to_exclude, group, shrink_flags, pg_options)
    if pg_options is not None:
        raise ValueError("pg_options: the pycoll backend takes no options (the shrunk group keeps the timeout of "
                         "the group it is shrunk from); pass None")
    excluded = c10d._validate_and_process_excluded_ranks(ranks_to_exclude, info)

    # torch's _finalize_shrunk_group, with a pycoll group where it registers the C++ Backend.
    if info["is_default_group"]:
        c10d._destroy_all_other_groups(exclude_group=old)
    meta = c10d._extract_group_metadata(old)
    name = meta["new_group_name"]
    # No clone of the store, unlike torch: a clone connects anew, and the store's host may be the rank that
    # died. The new group meets over the old one's connections and needs no store to form.
    new = old.shrunk(sorted(excluded), dist.PrefixStore(f"{name}/", meta["store"]),
                     revoke=shrink_flags == SHRINK_ABORT)
    global_ranks = dist.get_process_group_ranks(old)
    members = [global_ranks[r] for r in new.comm.ranks]
    c10d._cleanup_original_group(old, info["is_default_group"])
    new._set_group_name(name)
    new._set_group_desc("default:shrunken" if info["is_default_group"] else f"{meta['original_group_name']}:shrunk")
    if info["is_default_group"]:
        c10d._update_default_pg(new)
    c10d._register_pg_in_world(pg=new, backend_name=meta["backend_name"], store=meta["store"], group_name=name,
                               backend_config=meta["backend_config"],
                               rank_mapping={g: r for r, g in enumerate(members)})
    return new
