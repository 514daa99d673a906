"""What one pod may burn on its node and what a user's namespace may hold (pure): the
LimitRange's defaults and max, the ResourceQuota's object counts and scratch disk, and the
site settings that shape them."""

from __future__ import annotations

import json

import pytest

from paddle_ext import tenancy
from paddle_ext.hub.settings import HubSettings


def test_the_limit_range_defaults_every_container_and_caps_it():
    assert tenancy.limit_range("ns") == {
        "apiVersion": "v1", "kind": "LimitRange",
        "metadata": {"name": "paddlecloud-defaults", "namespace": "ns",
                     "labels": {"app.kubernetes.io/managed-by": "paddlecloud"}},
        "spec": {"limits": [{"type": "Container",
                             "default": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "20Gi"},
                             "defaultRequest": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "256Mi"},
                             "max": {"cpu": "128", "memory": "1Ti", "ephemeral-storage": "100Gi"}}]}}


def test_a_sites_limit_range_settings_reach_it_and_an_empty_max_means_none():
    made = tenancy.limit_range("ns", "2", "4Gi", {"cpu": 64, "memory": "256Gi"}, "1Gi", "50Gi")
    assert made["spec"]["limits"] == [{"type": "Container",
                                       "default": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "50Gi"},
                                       "defaultRequest": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "1Gi"},
                                       "max": {"cpu": "64", "memory": "256Gi"}}]
    assert "max" not in tenancy.limit_range("ns", maximum={})["spec"]["limits"][0]


def test_settings_default_to_the_tenancy_defaults_and_read_json_from_the_environment(tmp_path):
    settings = HubSettings()
    assert settings.limit_range_max == tenancy.LIMIT_RANGE_MAX
    assert settings.object_quota == tenancy.OBJECT_QUOTA
    assert (settings.limit_range_ephemeral_storage_request, settings.limit_range_ephemeral_storage) == (
        "256Mi", "20Gi")
    loaded = HubSettings.load(environ={"PADDLECLOUD_OBJECT_QUOTA": json.dumps({"count/configmaps": "50"}),
                                       "PADDLECLOUD_LIMIT_RANGE_MAX": json.dumps({"cpu": "16"})})
    assert loaded.object_quota == {"count/configmaps": "50"} and loaded.limit_range_max == {"cpu": "16"}


@pytest.mark.parametrize("field, value", [("object_quota", {"count/secrets": "lots"}),
                                          ("limit_range_max", {"memory": "-1x"})])
def test_a_bad_quantity_in_the_settings_is_named(field, value):
    with pytest.raises(ValueError, match=field):
        HubSettings(**{field: value})


def test_the_object_counts_cover_every_job_kind_and_leave_room_for_normal_use():
    quota = tenancy.OBJECT_QUOTA
    assert {"count/jobs.batch", "count/paddlejobs.kubeflow.org", "count/configmaps", "count/services",
            "count/secrets", "persistentvolumeclaims", "requests.ephemeral-storage"} <= set(quota)
    # Each job is a Job (+ a Service, + a code ConfigMap): the counts of those follow it, with room
    # for the namespace's own (kube-root-ca.crt) and the notebook's.
    assert int(quota["count/configmaps"]) > int(quota["count/jobs.batch"])
    assert int(quota["count/services"]) > int(quota["count/jobs.batch"])
