"""ipywidgets for notebooks: launch jobs, watch them, list them.

    from paddle_ext.widgets import JobLauncher, JobMonitor, JobList
    JobLauncher()               # a form; Launch starts the job and shows its monitor
    JobMonitor("train-x7k2p")   # re-attach to a job by name, e.g. after a kernel restart
"""

from .launcher import JobLauncher
from .monitor import JobList, JobMonitor

__all__ = ["JobLauncher", "JobMonitor", "JobList"]
