"""JobLauncher: a form built from the backend's options; Launch starts the job."""

from __future__ import annotations

import html
import shlex

import ipywidgets as widgets

from ..client import JobClient
from ..errors import PaddleCloudError, SpecError
from ..progress import queue_detail
from ..quota.model import WORDS, QuotaReport
from ..spec import JobSpec
from .monitor import JobMonitor

LOCAL_IMAGE_CHOICE = "this Python environment"  # jobs of the local backend run here, not in an image


def launch_message(job) -> str:
    """What the launcher says once a job is submitted: started, or queued and where it stands."""
    if job.queue:
        return f"Queued <b>{html.escape(job.name)}</b> &mdash; {html.escape(queue_detail(job.queue))}"
    return f"Started <b>{html.escape(job.name)}</b>"


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and # comments ignored) -> dict; SpecError if malformed."""
    env = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise SpecError({"env": f"line {number} must look like KEY=VALUE (got '{line}')"})
        env[key.strip()] = value
    return env


def parse_command(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise SpecError({"command": f"cannot be split into arguments ({exc})"}) from exc


def quota_line(quota: QuotaReport) -> str:
    """'GPUs: 2 used of 4; CPU: 2 used; ...' for the limited resources and running jobs."""
    limits = quota.limits.set_fields()
    parts = []
    for field in ("gpus", "cpu", "memory", "running_jobs"):
        limit = limits.get(field)
        parts.append(f"{WORDS[field]}: {quota.used.get(field, 0)} used" + ("" if limit is None else f" of {limit}"))
    return "; ".join(parts)


class JobLauncher(widgets.VBox):
    """Pick workers, GPUs, CPU, memory, image, datasets, command and env, then Launch.

    Keyword arguments named like JobSpec fields (workers=2, command=[...], ...) preset the form."""

    PRESETS = ("name", "workers", "gpus_per_worker", "cpu", "memory", "image", "datasets", "command", "env",
               "max_restarts")

    def __init__(self, client: JobClient | None = None, **kwargs):
        presets = {key: kwargs.pop(key) for key in self.PRESETS if key in kwargs}
        self.client = client or JobClient()
        self.options = options = self.client.options()
        self.monitor: JobMonitor | None = None
        defaults = {**options.defaults(), **presets}
        style = {"description_width": "120px"}

        self.name = widgets.Text(description="Name", value=defaults.get("name") or "",
                                 placeholder="generated if empty", style=style)
        self.workers = widgets.BoundedIntText(
            description="Workers", value=defaults["workers"], min=1, max=options.max_workers, style=style)
        self.gpus = widgets.BoundedIntText(
            description="GPUs per worker", value=defaults["gpus_per_worker"],
            min=0, max=options.max_gpus_per_worker, style=style, disabled=options.max_gpus_per_worker == 0)
        self.cpu = widgets.Text(description="CPU per worker", value=defaults["cpu"], style=style)
        self.memory = widgets.Text(description="Memory", value=defaults["memory"], style=style)
        images = [image.name for image in options.images]
        # Without an image list, the one image jobs run in (Kubernetes' default worker image),
        # or this Python environment (the local backend): said, not offered as a choice.
        fixed = options.job_image or LOCAL_IMAGE_CHOICE
        self.image = widgets.Dropdown(description="Image", options=images or [fixed],
                                      value=defaults["image"] if images else fixed,
                                      style=style, disabled=not images)
        self._has_images = bool(images)
        datasets = [dataset.name for dataset in options.datasets]
        self.datasets = widgets.SelectMultiple(description="Datasets", options=datasets, style=style,
                                               value=tuple(defaults.get("datasets") or ()),
                                               disabled=not datasets, rows=min(max(len(datasets), 1), 5))
        self.command = widgets.Text(description="Command", value=shlex.join(defaults["command"]),
                                    style=style, layout=widgets.Layout(width="560px"))
        self.env = widgets.Textarea(description="Environment", placeholder="KEY=VALUE, one per line",
                                    value="\n".join(f"{k}={v}" for k, v in (defaults.get("env") or {}).items()),
                                    style=style, layout=widgets.Layout(width="560px", height="60px"))
        self.max_restarts = widgets.BoundedIntText(
            description="Max restarts", value=defaults["max_restarts"], min=0, max=options.max_restarts,
            style=style, disabled=options.max_restarts == 0,
            tooltip="Restart all workers together up to this many times after a worker is lost, "
                                "killed or evicted (an error in your code is not retried)")
        self.launch_button = widgets.Button(description="Launch", button_style="primary", icon="rocket")
        self.message = widgets.HTML()
        self.quota_view = widgets.HTML()
        self.outputs_view = widgets.HTML(
            f'<small class="paddle-outputs-note">{html.escape(options.outputs_note)}</small>'
            if options.outputs_note else "")
        self.monitor_box = widgets.VBox()
        self.launch_button.on_click(self._on_launch)
        super().__init__(
            [self.name, self.workers, self.gpus, self.cpu, self.memory, self.image, self.datasets,
             self.command, self.env, self.max_restarts, widgets.HBox([self.launch_button, self.message]),
             self.quota_view, self.outputs_view, self.monitor_box],
            **kwargs,
        )
        self.add_class("paddle-launcher")
        self._show_quota()

    def spec(self) -> JobSpec:
        """The JobSpec the form describes; SpecError names what is wrong."""
        return JobSpec(
            name=self.name.value.strip() or None,
            command=parse_command(self.command.value),
            workers=self.workers.value,
            gpus_per_worker=self.gpus.value,
            cpu=self.cpu.value.strip(),
            memory=self.memory.value.strip(),
            image=self.image.value if self._has_images else None,
            datasets=list(self.datasets.value),
            env=parse_env(self.env.value),
            max_restarts=self.max_restarts.value,
        )

    def _show_quota(self) -> None:
        try:
            quota = self.client.quota()
        except PaddleCloudError:
            return
        self.quota_view.value = f'<small class="paddle-quota">Quota &mdash; {html.escape(quota_line(quota))}</small>'

    def launch(self):
        """Submit the form's job and show its monitor; returns the Job."""
        job = self.client.submit(self.spec())
        self.monitor = JobMonitor(job.name, client=self.client, on_done=lambda _job: self._show_quota())
        self.monitor_box.children = [self.monitor]
        self.message.value = launch_message(job)
        self._show_quota()
        return job

    def _on_launch(self, _button) -> None:
        self.launch_button.disabled = True
        self.message.value = "Launching&hellip;"
        try:
            self.launch()
        except PaddleCloudError as exc:
            self.message.value = f'<span style="color:#c62828">{html.escape(exc.message)}</span>'
        finally:
            self.launch_button.disabled = False
