"""The quota model as Kueue queues (kueue.x-k8s.io/v1beta2). Pure, no I/O.

With Kueue configured (the hub's `kueue_enabled`), the quota page's numbers become queues:

- one ResourceFlavor, `paddlecloud` (no node labels: every node is one flavor; GPU
  placement stays with the pods' own node selector and tolerations);
- a ClusterQueue per **team**: every group with a quota entry that sets GPUs, CPU or memory
  gets `paddlecloud-team-<group>`, whose nominal quota (what the team is guaranteed) is the
  group's GPUs/CPU/memory, taken from the default (saved, then the site's) for a field the
  group leaves unset. With Kueue the group's numbers are the *team's pooled guarantee*, shared
  by its members, not a per-member limit;
- a ClusterQueue per **person** who has no team queue or has a personal override:
  `paddlecloud-user-<user>`, nominal = the user's effective limits (module `model`'s
  resolution rule). So a user in no quota'd group keeps exactly the guarantee the quota page
  shows for them (the default), and a personal override (e.g. an admin lowering one member
  of a team to 2 GPUs) is a queue of its own, because Kueue has no per-member limit inside a
  queue and the ResourceQuota must never refuse what Kueue admitted;
- all of them in one cohort, `paddlecloud`: a queue's idle nominal quota is lent to the
  others (up to the site's lending limit) and a queue may borrow beyond its nominal quota
  (up to the site's borrowing limit); a queue reclaims what it lent by preempting
  borrowers (`reclaimWithinCohort: Any`), and inside a queue a higher priority job may
  preempt a lower one (`withinClusterQueue: LowerPriority`);
- per user namespace a LocalQueue named `default` pointing at the user's queue. Kueue
  v0.17's LocalQueueDefaulting (GA, locked on: pkg/features/kube_features.go) labels every
  Job created without `kueue.x-k8s.io/queue-name` in a namespace that has a LocalQueue named
  `default` with that queue (jobframework.ApplyDefaultLocalQueue in its Job webhook), and the
  webhook then suspends it: a user's own `kubectl create job` in the notebook is queued like
  every other job, it cannot bypass the queue.

A user in several teams goes into the team queue with the most GPUs (then CPU, memory, then
the group's name): a job runs in one queue.

**Sharing inside a queue.** By default jobs in one ClusterQueue are admitted in BestEffortFIFO
order: higher priority first, then the older one (the time Kueue queued it), skipping a job
that does not fit so a smaller one behind it can start; the position a user is shown is exact
(kueue#2833 asks for a position that holds). With the site's `kueue_fair_sharing`, a team's
queue uses Kueue's Admission Fair Sharing (`spec.admissionScope.admissionMode:
UsageBasedAdmissionFairSharing`; beta and on by default in v0.17, active once the Kueue
Configuration has `admissionFairSharing`): before priority and age, Kueue takes the job of the
member whose LocalQueue has the least decayed past usage divided by its weight
(`spec.fairSharing.weight`, the site's `kueue_user_weights`, default 1), so over a run the
members' GPU time follows their weights. The price: the order then depends on usage that
changes by the second, so a position shown is the FIFO one and may change as others run.
Per-member hard limits are the personal override (a queue of their own).

**The ResourceQuota stays the hard backstop** and must never be lower than what Kueue may
admit for the user, or an admitted job's pods would be refused: for GPUs, CPU and memory it
is at least nominal + borrowing limit of the user's queue (`backstop`). Without a borrowing
limit Kueue may admit up to whatever the cohort lends, so the ResourceQuota leaves that
resource unbounded (Kueue is the gate; set `kueue_borrowing_limit` to keep a numeric
backstop). Pods and the running-jobs cap are not Kueue resources and stay as they are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from decimal import Decimal
from typing import Iterable, Mapping

from ..constants import GPU_RESOURCE, MANAGED_BY, QUEUE_OWNER_ANNOTATION, QUEUE_TITLE_ANNOTATION, USER_LABEL
from ..quantity import parse_quantity
from .model import QUANTITY_FIELDS, WORDS, Limits, QuotaConfig, format_amount, resolve

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
COHORT = "paddlecloud"
FLAVOR = "paddlecloud"
ADMISSION_FAIR_SHARING = "UsageBasedAdmissionFairSharing"  # ClusterQueue spec.admissionScope.admissionMode
LOCAL_QUEUE = "default"  # Kueue's LocalQueueDefaulting name (constants.DefaultLocalQueueName)
TEAM_PREFIX = "paddlecloud-team-"
USER_PREFIX = "paddlecloud-user-"
QUEUE_FIELDS = ("gpus", "cpu", "memory")  # what Kueue admits by; pods and running jobs stay ResourceQuota's
# A queue field no entry limits is "unlimited": Kueue needs a number, and these are far past any cluster.
UNLIMITED = {"gpus": Decimal(1_000_000), "cpu": Decimal(1_000_000), "memory": Decimal(2 ** 60)}
# Scratch disk: every container asks for some (the namespace's LimitRange gives it a request),
# and Kueue refuses a Workload asking for a resource its ClusterQueue does not cover ("resource
# ephemeral-storage unavailable in ClusterQueue"). So queues cover it without counting it: the
# user's ResourceQuota bounds it (tenancy.OBJECT_QUOTA).
UNCOUNTED_RESOURCES = {"ephemeral-storage": "1Pi"}
_DNS = re.compile(r"[^a-z0-9-]+")


DEFAULT_WEIGHT = Decimal(1)


@dataclasses.dataclass(frozen=True)
class QueuePolicy:
    """The site's lending and borrowing limits, the same for every queue (None: no limit).
    A lending limit above a queue's nominal quota lends all of it. `fair_sharing`: team queues
    share among their members by Admission Fair Sharing (module docstring), each member's
    LocalQueue with its `weights` entry (username -> weight; DEFAULT_WEIGHT for the others)."""

    lending: Limits = Limits()
    borrowing: Limits = Limits()
    fair_sharing: bool = False
    weights: Mapping[str, Decimal] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_settings(cls, lending: Mapping | None, borrowing: Mapping | None, fair_sharing: bool = False,
                      weights: Mapping | None = None) -> QueuePolicy:
        """From settings in quota fields ({"gpus": 4, "cpu": "16", "memory": "64Gi"}) and
        per-user weights ({"alice": 2}); ValueError or QuotaInputError names a bad one."""
        return cls(Limits.from_dict(_queue_fields(lending, "lending")),
                   Limits.from_dict(_queue_fields(borrowing, "borrowing")),
                   bool(fair_sharing), _weights(weights))

    def weight(self, username: str) -> Decimal:
        """The user's weight in their team queue's fair sharing."""
        return self.weights.get(username, DEFAULT_WEIGHT)


def _weights(values: Mapping | None) -> dict[str, Decimal]:
    out = {}
    for user, value in dict(values or {}).items():
        try:
            weight = Decimal(str(value))
        except ArithmeticError:
            weight = None
        if isinstance(value, bool) or weight is None or not weight.is_finite() or weight <= 0:
            raise ValueError(f"kueue_user_weights: {user}'s weight must be a number above 0 (got {value!r})")
        out[str(user)] = weight
    return out


def _queue_fields(values: Mapping | None, what: str) -> dict:
    values = dict(values or {})
    extra = sorted(set(values) - set(QUEUE_FIELDS))
    if extra:
        raise ValueError(f"kueue_{what}_limit: only {', '.join(QUEUE_FIELDS)} (got {', '.join(map(str, extra))})")
    return values


@dataclasses.dataclass(frozen=True)
class Queue:
    """One ClusterQueue: its name, who it is for, and its nominal quota per QUEUE_FIELDS
    (None: unlimited)."""

    name: str
    title: str  # "team vision's queue", "alice's queue"
    owner: str  # "group:vision", "user:alice"
    nominal: Mapping[str, Decimal | None]

    def amount(self, field: str) -> Decimal:
        value = self.nominal.get(field)
        return UNLIMITED[field] if value is None else value


def dns_name(prefix: str, name: str) -> str:
    """A ClusterQueue name (DNS-1123 subdomain, <= 63 chars to be safe in labels) for a hub
    group or user name; names that are not valid as they are get a short hash, so two
    different names never share a queue."""
    slug = _DNS.sub("-", name.lower()).strip("-") or "x"
    if slug == name and len(prefix) + len(slug) <= 63:
        return prefix + slug
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{prefix}{slug[:63 - len(prefix) - 9].rstrip('-')}-{digest}"


def _value(field: str, value) -> Decimal | None:
    if value is None:
        return None
    return _amount(field, value)


def _amount(field: str, value) -> Decimal:
    return parse_quantity(value) if field in QUANTITY_FIELDS else Decimal(value)


def _default_value(config: QuotaConfig, field: str):
    value = getattr(config.default.limits, field)
    return value if value is not None else getattr(config.site_default, field)


def _sets_queue_field(limits: Limits) -> bool:
    return any(getattr(limits, field) is not None for field in QUEUE_FIELDS)


def team_queue(config: QuotaConfig, group: str) -> Queue:
    """The ClusterQueue of a group with a quota entry."""
    limits = config.groups[group].limits
    nominal = {}
    for field in QUEUE_FIELDS:
        value = getattr(limits, field)
        nominal[field] = _value(field, value if value is not None else _default_value(config, field))
    return Queue(dns_name(TEAM_PREFIX, group), f"team {group}'s queue", f"group:{group}", nominal)


def personal_queue(config: QuotaConfig, username: str, groups: Iterable[str]) -> Queue:
    effective = resolve(config, username, groups).limits
    nominal = {field: _value(field, getattr(effective, field)) for field in QUEUE_FIELDS}
    return Queue(dns_name(USER_PREFIX, username), f"{username}'s queue", f"user:{username}", nominal)


def queue_for(config: QuotaConfig, username: str, groups: Iterable[str]) -> Queue:
    """The user's ClusterQueue (module docstring): their own when their entry sets GPUs, CPU
    or memory or no group of theirs has a quota for them; else the team queue with the most
    GPUs, then CPU, then memory, then the first name."""
    groups = sorted(set(groups))
    own = config.users.get(username)
    teams = [team_queue(config, g) for g in groups if g in config.groups and _sets_queue_field(config.groups[g].limits)]
    if (own is not None and _sets_queue_field(own.limits)) or not teams:
        return personal_queue(config, username, groups)
    return min(teams, key=lambda q: (*(-q.amount(f) for f in QUEUE_FIELDS), q.name))


def team_queues(config: QuotaConfig) -> list[Queue]:
    """Every team's ClusterQueue (whether or not it has members yet)."""
    return [team_queue(config, g) for g in sorted(config.groups) if _sets_queue_field(config.groups[g].limits)]


# ------------------------------------------------------------------ arithmetic

def lending_limit(nominal: Decimal, limit: Decimal | None) -> Decimal | None:
    """What a queue may lend of `nominal`: the site's limit, at most all of it (None: no limit)."""
    return None if limit is None else min(limit, nominal)


def ceiling(nominal: Decimal | None, borrowing_limit: Decimal | None) -> Decimal | None:
    """The most Kueue may admit from a queue: its nominal quota plus what it may borrow.
    None (no bound) when either is unlimited: without a borrowing limit the cohort decides."""
    if nominal is None or borrowing_limit is None:
        return None
    return nominal + borrowing_limit


def backstop(effective: Limits, queue: Queue, policy: QueuePolicy) -> Limits:
    """The user's ResourceQuota limits with Kueue: for GPUs, CPU and memory never lower than
    the most Kueue may admit from the user's queue (`ceiling`), nor lower than the user's own
    effective limit; unbounded when Kueue's admission is (no borrowing limit). Pods and the
    running-jobs cap as they are."""
    values = {}
    for field in QUEUE_FIELDS:
        top = ceiling(queue.nominal.get(field), _value(field, getattr(policy.borrowing, field)))
        own = _value(field, getattr(effective, field))
        if top is None:
            values[field] = None
            continue
        amount = max(top, own) if own is not None else top
        values[field] = format_amount(field, amount) if field in QUANTITY_FIELDS else int(amount)
    return dataclasses.replace(effective, **values)


def can_ever_fit(need: Mapping[str, Decimal], nominal: Mapping[str, Decimal | None],
                 borrowing_limit: Mapping[str, Decimal | None], lendable_by_others: Mapping[str, Decimal | None]
                 ) -> tuple[str, Decimal, Decimal] | None:
    """Whether a job needing `need` (QUEUE_FIELDS -> amount) can ever be admitted from a
    queue: nominal + what it may borrow (min of its borrowing limit and what the others in
    the cohort may lend; None: unlimited/unknown). The first field that cannot, as (field,
    need, most); None if every field can."""
    for field in QUEUE_FIELDS:
        amount = need.get(field) or Decimal(0)
        base = nominal.get(field)
        if not amount or base is None:
            continue
        borrowable = [x for x in (borrowing_limit.get(field), lendable_by_others.get(field)) if x is not None]
        if not borrowable:
            continue  # unbounded: the cohort decides
        most = base + min(borrowable)
        if amount > most:
            return field, amount, most
    return None


# ------------------------------------------------------------------ objects

def resource_flavor() -> dict:
    return {"apiVersion": KUEUE_API_VERSION, "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR, "labels": dict(MANAGED_BY)}}


def _quantity(field: str, amount: Decimal) -> str:
    return str(int(amount)) if field == "gpus" else format_amount(field, amount)


def cluster_queue(queue: Queue, policy: QueuePolicy = QueuePolicy(), gpu_resource: str = GPU_RESOURCE) -> dict:
    """The ClusterQueue of `queue`: its nominal quota of CPU, memory and GPUs in the one
    flavor (and scratch disk, covered but not counted: UNCOUNTED_RESOURCES), lending and
    borrowing limits from `policy`, in the cohort, BestEffortFIFO, reclaiming what it lent and
    preempting lower priority inside; a team's queue with `policy.fair_sharing` orders its
    members' jobs by Admission Fair Sharing (a personal queue has one member: nothing to share)."""
    resource_names = {"cpu": "cpu", "memory": "memory", "gpus": gpu_resource}
    resources = []
    for field in ("cpu", "memory", "gpus"):
        nominal = queue.amount(field)
        entry = {"name": resource_names[field], "nominalQuota": _quantity(field, nominal)}
        lend = lending_limit(nominal, _value(field, getattr(policy.lending, field)))
        if lend is not None:
            entry["lendingLimit"] = _quantity(field, lend)
        borrow = _value(field, getattr(policy.borrowing, field))
        if borrow is not None:
            entry["borrowingLimit"] = _quantity(field, borrow)
        resources.append(entry)
    resources += [{"name": name, "nominalQuota": amount} for name, amount in UNCOUNTED_RESOURCES.items()]
    return {
        "apiVersion": KUEUE_API_VERSION, "kind": "ClusterQueue",
        "metadata": {"name": queue.name, "labels": dict(MANAGED_BY),
                     "annotations": {QUEUE_TITLE_ANNOTATION: queue.title, QUEUE_OWNER_ANNOTATION: queue.owner}},
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {"matchExpressions": [{"key": USER_LABEL, "operator": "Exists"}]},
            "queueingStrategy": "BestEffortFIFO",
            "resourceGroups": [{"coveredResources": [r["name"] for r in resources],
                                "flavors": [{"name": FLAVOR, "resources": resources}]}],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
            **({"admissionScope": {"admissionMode": ADMISSION_FAIR_SHARING}}
               if policy.fair_sharing and queue.owner.startswith("group:") else {}),
        },
    }


def weight_quantity(weight: Decimal) -> str:
    """A LocalQueue's spec.fairSharing.weight (a Kubernetes quantity) for a weight."""
    return format(weight.normalize(), "f")


def queue_annotation(queue: Queue, policy: QueuePolicy) -> str:
    """What the user's notebook may know of its queue (it cannot read ClusterQueues): name,
    title, nominal and borrowing limit per field, as JSON on the user's ResourceQuota."""
    def amounts(values: Mapping[str, Decimal | None]) -> dict:
        return {f: (None if values.get(f) is None else _quantity(f, values[f])) for f in QUEUE_FIELDS}

    borrowing = {f: _value(f, getattr(policy.borrowing, f)) for f in QUEUE_FIELDS}
    return json.dumps({"cluster_queue": queue.name, "title": queue.title, "nominal": amounts(queue.nominal),
                       "borrowing_limit": amounts(borrowing)}, sort_keys=True)


def read_queue_annotation(text: str | None) -> dict | None:
    """queue_annotation back: {"cluster_queue", "title", "nominal": {field: Decimal|None},
    "borrowing_limit": {...}}; None when absent or unreadable (a user-writable place)."""
    try:
        data = json.loads(text) if text else None
        if not isinstance(data, dict):
            return None
        out = {"cluster_queue": str(data["cluster_queue"]), "title": str(data.get("title") or data["cluster_queue"])}
        for key in ("nominal", "borrowing_limit"):
            values = data.get(key) or {}
            out[key] = {f: (None if values.get(f) is None else _amount(f, str(values[f]))) for f in QUEUE_FIELDS}
        return out
    except (ValueError, KeyError, TypeError, ArithmeticError):
        return None


# ------------------------------------------------------------------ the preflight with Kueue

def never_fits(need: Mapping[str, Decimal], gpus_per_worker: int, queue: Mapping | None, hard: Limits,
               largest_node_gpus: int | None, cluster_gpus: int | None = None) -> str | None:
    """Why a job can never start with Kueue, in one sentence with the numbers; None when it
    may (now or later: then it is created and waits in the queue).

    `need`: the job's total per field (gpus, cpu, memory, pods); `queue`: the user's queue as
    read_queue_annotation gives it (None: unknown, not checked); `hard`: the ResourceQuota's
    limits (its own count of what is in use does not matter: queued jobs wait for room);
    `largest_node_gpus`: the most GPUs any node has, `cluster_gpus` all nodes together (None:
    nodes cannot be read)."""
    if queue is not None:
        nominal, borrowing = queue["nominal"], queue["borrowing_limit"]
        over = can_ever_fit(need, nominal, borrowing, {})
        if over is not None:
            field, amount, most = over
            words = WORDS[field]
            return (f"Needs {_shown(field, amount)} {words}; {queue['title']} can admit at most {_shown(field, most)} "
                    f"({_shown(field, nominal[field])} guaranteed + {_shown(field, borrowing[field])} it may borrow), "
                    "so this job could never start. Use fewer workers or GPUs, or ask an admin.")
    for field in ("gpus", "cpu", "memory", "pods"):
        limit, amount = getattr(hard, field), need.get(field) or Decimal(0)
        if limit is not None and amount > _amount(field, limit):
            return (f"Needs {_shown(field, amount)} {WORDS[field]}; your quota is {_shown(field, _amount(field, limit))}, "
                    "so this job could never start. Use fewer workers or ask an admin.")
    if largest_node_gpus is not None and gpus_per_worker > largest_node_gpus:
        return (f"Needs {gpus_per_worker} GPUs per worker; the largest node has {largest_node_gpus}, so this job "
                "could never start. Use more workers with fewer GPUs each.")
    gpus = need.get("gpus") or Decimal(0)
    if cluster_gpus is not None and gpus > cluster_gpus:
        return (f"Needs {_shown('gpus', gpus)} GPUs; the whole cluster has {cluster_gpus}, so this job could never "
                "start. Use fewer workers or GPUs.")
    return None


def _shown(field: str, amount: Decimal) -> str:
    return format_amount(field, amount)
