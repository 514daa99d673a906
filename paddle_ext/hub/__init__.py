"""The hub side of PaddleCloud Hub: code that runs in the JupyterHub process and the
services it starts, never next to the user.

    settings       HubSettings (values file + PADDLECLOUD_* variables), profiles (pure)
    spawner        PaddleCloudSpawner: KubeSpawner + the user's namespace, quota first
    notebook_gpus  whether a GPU notebook fits on a node now, else why and when (pure)
    local          the embedded default's authenticator, spawner and paths
    demo           `python -m paddle_ext.hub.demo`: start the local hub
    quota_config   adds the quota service, its scopes and roles to a hub config
    quota_service  the quota service at /services/quota/ (page + JSON API): the application
    quota_handlers its routes and handlers
    hub_directory  the hub's users and groups, from its REST API
    quota_sync     users' effective limits -> their ResourceQuota
    usage          what each user's jobs use, for the quota service

It may import the notebook side (backends, the quota model); the notebook side never
imports it.
"""
