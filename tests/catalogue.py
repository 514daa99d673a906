"""The deployment catalogue the tests configure (one copy for every tier): the shared
datasets (the admin guide's catalogue entry, docs/admin/kubernetes.md, on Kubernetes and on the embedded default) and
the images a deployment offers."""

from __future__ import annotations

from pathlib import Path

# On Kubernetes: one team claim, a sub-path per dataset; the hub creates the claim in each
# user namespace (docs/admin/kubernetes.md, "A dataset catalogue entry").
IMAGENET = {"name": "imagenet", "description": "ILSVRC 2012", "mount_path": "/datasets/imagenet",
            "sub_path": "imagenet", "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}},
            "claim": {"accessModes": ["ReadOnlyMany"], "storageClassName": "datasets",
                      "resources": {"requests": {"storage": "1Gi"}}}}
COCO = {"name": "coco", "description": "COCO 2017", "mount_path": "/datasets/coco", "sub_path": "coco",
        "volume": {"persistentVolumeClaim": {"claimName": "team-datasets"}}}
DATASETS = (IMAGENET, COCO)

IMAGES = ({"name": "registry.example/paddle:3.3.1-cpu", "description": "PaddlePaddle 3.3.1, CPU"},
          {"name": "registry.example/paddle:3.3.1-gpu", "description": "PaddlePaddle 3.3.1, CUDA"})


def local_datasets(folder: Path | str) -> list[dict]:
    """The same catalogue on the embedded default: each dataset is a folder under `folder`
    (a local run gets it as $PADDLECLOUD_DATASET_<NAME>); "image-net" has a hyphen on purpose."""
    return [{"name": "mnist", "description": "MNIST", "mount_path": "/datasets/mnist", "path": f"{folder}/mnist"},
            {"name": "image-net", "description": "ILSVRC 2012", "mount_path": "/datasets/imagenet",
             "path": f"{folder}/imagenet"}]
