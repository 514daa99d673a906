"""What a cluster has and what its pods ask for, per node (pure; dicts in, numbers out).

Used for "the most GPUs free on any node" in Unschedulable messages and for the admin
overview's capacity table. A node's capacity is its `allocatable`; what is used is the
sum of the requests of the live pods bound to it (containers, or the largest init
container if that is more), as the scheduler counts them.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from typing import Iterable

from .constants import GPU_RESOURCE
from .quantity import format_quantity, parse_quantity

FINISHED_POD_PHASES = ("Succeeded", "Failed")
LIVE_POD_PHASES = ("Pending", "Running", "Unknown")
# The API server's field selector for pods not yet finished (live pods hold their requests).
LIVE_PODS_SELECTOR = ",".join(f"status.phase!={phase}" for phase in FINISHED_POD_PHASES)
# ... and for finished ones (a selector cannot say "one of"; a pod with no phase yet matches both).
FINISHED_PODS_SELECTOR = ",".join(f"status.phase!={phase}" for phase in LIVE_POD_PHASES)


@dataclasses.dataclass(frozen=True)
class Resources:
    gpus: int = 0
    cpu: Decimal = Decimal(0)
    memory: Decimal = Decimal(0)

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.gpus + other.gpus, self.cpu + other.cpu, self.memory + other.memory)

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "cpu": format_quantity(self.cpu), "memory": format_quantity(self.memory, binary=True)}

    @classmethod
    def of(cls, amounts: dict | None, gpu_resource: str = GPU_RESOURCE) -> Resources:
        """From a resources map such as {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": "1"}."""
        amounts = amounts or {}
        return cls(int(parse_quantity(amounts.get(gpu_resource, "0"))), parse_quantity(amounts.get("cpu", "0")),
                   parse_quantity(amounts.get("memory", "0")))


def _largest(items: Iterable[Resources]) -> Resources:
    items = list(items)
    return Resources(max((i.gpus for i in items), default=0), max((i.cpu for i in items), default=Decimal(0)),
                     max((i.memory for i in items), default=Decimal(0)))


def pod_requests(pod: dict, gpu_resource: str = GPU_RESOURCE) -> Resources:
    """What a pod asks the scheduler for: its containers' requests together, or its largest
    init container's where that is more."""
    spec = pod.get("spec") or {}
    containers = sum((Resources.of((c.get("resources") or {}).get("requests"), gpu_resource)
                      for c in spec.get("containers") or []), Resources())
    init = _largest(Resources.of((c.get("resources") or {}).get("requests"), gpu_resource)
                    for c in spec.get("initContainers") or [])
    return _largest([containers, init])


@dataclasses.dataclass(frozen=True)
class NodeUsage:
    name: str
    capacity: Resources
    used: Resources
    schedulable: bool = True

    @property
    def free_gpus(self) -> int:
        return self.capacity.gpus - self.used.gpus

    def to_dict(self) -> dict:
        return {"name": self.name, "schedulable": self.schedulable, "capacity": self.capacity.to_dict(),
                "used": self.used.to_dict()}


def node_usage(nodes: list[dict], pods: list[dict], gpu_resource: str = GPU_RESOURCE) -> list[NodeUsage]:
    """Each node's allocatable resources and the requests of the live pods bound to it."""
    used: dict[str, Resources] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in FINISHED_POD_PHASES:
            continue
        used[node] = used.get(node, Resources()) + pod_requests(pod, gpu_resource)
    return [NodeUsage(node["metadata"]["name"],
                      Resources.of((node.get("status") or {}).get("allocatable"), gpu_resource),
                      used.get(node["metadata"]["name"], Resources()),
                      not (node.get("spec") or {}).get("unschedulable"))
            for node in sorted(nodes, key=lambda n: n["metadata"]["name"])]


def total(nodes: Iterable[NodeUsage]) -> dict:
    """{"capacity": ..., "used": ...} over all nodes."""
    nodes = list(nodes)
    return {"capacity": sum((n.capacity for n in nodes), Resources()).to_dict(),
            "used": sum((n.used for n in nodes), Resources()).to_dict()}


def pods_in_use(pods: list[dict], gpu_resource: str = GPU_RESOURCE) -> dict[str, Decimal]:
    """What a namespace's live pods hold, in the quota model's fields (gpus, cpu, memory,
    pods), whatever its ResourceQuota limits: a quota counts only the resources it limits."""
    live = [pod for pod in pods if (pod.get("status") or {}).get("phase") not in FINISHED_POD_PHASES]
    held = sum((pod_requests(pod, gpu_resource) for pod in live), Resources())
    return {"gpus": Decimal(held.gpus), "cpu": held.cpu, "memory": held.memory, "pods": Decimal(len(live))}


UNSCHEDULABLE_TAINT_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: dict, taint: dict) -> bool:
    """Whether one toleration covers one taint, as the scheduler matches them."""
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if not toleration.get("key"):  # an empty key with Exists tolerates every taint
        return toleration.get("operator") == "Exists"
    if toleration["key"] != taint.get("key"):
        return False
    return toleration.get("operator") == "Exists" or toleration.get("value", "") == taint.get("value", "")


def node_accepts(node: dict, pod_spec: dict) -> bool:
    """Whether a pod with this spec may be placed on the node: its nodeSelector matches the
    node's labels and its tolerations cover the node's NoSchedule/NoExecute taints (resources
    aside; node affinity is not read)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(key) != value for key, value in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    tolerations = pod_spec.get("tolerations") or []
    return all(any(tolerates(t, taint) for t in tolerations)
               for taint in (node.get("spec") or {}).get("taints") or []
               if taint.get("effect") in UNSCHEDULABLE_TAINT_EFFECTS)


def max_free_gpus(nodes: list[dict], pods: list[dict], gpu_resource: str = GPU_RESOURCE,
                  pod_spec: dict | None = None) -> int:
    """The most GPUs any one schedulable node has free; with `pod_spec`, among the nodes that
    pod may be placed on (its node selector and tolerations)."""
    if pod_spec is not None:
        nodes = [node for node in nodes if node_accepts(node, pod_spec)]
    return max([0, *(n.free_gpus for n in node_usage(nodes, pods, gpu_resource) if n.schedulable)])


def node_gpus(nodes: list[dict], gpu_resource: str = GPU_RESOURCE) -> tuple[int, int]:
    """(the most GPUs one schedulable node has, all schedulable nodes' GPUs together), allocatable:
    what one worker, and one job, can ever get."""
    counts = [usage.capacity.gpus for usage in node_usage(nodes, [], gpu_resource) if usage.schedulable]
    return max(counts, default=0), sum(counts)
