"""Counters a user needs to understand a run. Every refused allocation, failed backup, eviction path
and prefetch outcome increments a named field here: the core never fails silently."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Counters:
    """Cumulative event counts; pages unless the name says tokens."""

    # Prefix hits, filled by the request flow (hit pages form a prefix: device, then host, then storage).
    requests: int = 0
    prompt_pages: int = 0
    device_hit_pages: int = 0
    host_hit_pages: int = 0
    storage_hit_pages: int = 0
    # Device (L1) eviction, by path.
    device_evict_calls: int = 0
    device_evicted_pages: int = 0
    device_evicted_to_host_pages: int = 0  # D+H lost its device copy, stays as H-only
    device_deleted_pages: int = 0  # D-only deleted: no host copy, the KV is gone
    device_demoted_pages: int = 0  # D-only written to host at eviction (write_back / boundary), now H-only
    device_dropped_subtree_pages: int = 0  # write_back/boundary fallback: subtree dropped without backup
    # Host (L2) eviction, by path.
    host_evict_calls: int = 0
    host_evicted_pages: int = 0
    host_deleted_pages: int = 0  # H-only node deleted
    host_mirror_reclaimed_pages: int = 0  # D+H dropped its host copy (reclaim_mirrors / boundary dedup)
    # Backups device -> host.
    backups: int = 0
    backup_pages: int = 0
    backup_failures: int = 0  # write_backup found no host room even after evict_host
    backup_skipped_parent: int = 0  # skipped: parent not backed up (prefix-closed host set)
    failed_host_allocations: int = 0  # every host allocation that failed after eviction
    # Load-back host -> device.
    load_backs: int = 0
    load_back_pages: int = 0
    load_back_below_threshold: int = 0
    load_back_over_quota: int = 0
    load_back_failed_alloc: int = 0
    reattached_pages: int = 0  # H-only pages given the request's device copy again at insert
    failed_device_allocations: int = 0
    # Storage (L3).
    storage_backups: int = 0
    storage_backup_pages: int = 0
    prefetch_issued: int = 0
    prefetch_rate_limited: int = 0
    prefetch_below_threshold: int = 0
    prefetch_unbacked_anchor: int = 0  # not started: the match ends on a node without host copy (cache mode)
    prefetch_completed: int = 0
    prefetch_terminated: int = 0  # stopped before every hit page arrived
    prefetch_revoked: int = 0  # nothing usable (no hit, below threshold, no host room, request gone)
    prefetch_host_alloc_failed: int = 0
    prefetch_pages: int = 0  # pages read from storage into host
    prefetch_inserted_pages: int = 0  # of those, new to the tree
    prefetch_duplicate_pages: int = 0  # already in the tree when inserted (freed at once)
    # buffer_only write pipeline.
    buffer_intents: int = 0
    buffer_intents_dropped: int = 0
    buffer_staged_pages: int = 0

    def as_dict(self) -> dict[str, int]:
        """Plain dict for JSON output."""
        return asdict(self)
