"""Errors users see. Each carries a stable code, an HTTP status and one sentence.

Every layer (REST, CLI, widgets) shows these the same way; anything else that
escapes is a bug and is reported as an internal error.
"""


class PaddleCloudError(Exception):
    """Base class: `code` for programs, `message` for people, `status` for HTTP."""

    code = "error"
    status = 500

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict:
        return {"error": self.code, "message": self.message}


class InvalidFields(PaddleCloudError):
    """Input whose named fields broke rules. `problems` maps each rejected field to its rule."""

    status = 400
    what = "input"

    def __init__(self, problems: dict[str, str]):
        self.problems = dict(problems)
        text = "; ".join(f"{field}: {rule}" for field, rule in self.problems.items())
        super().__init__(f"Invalid {self.what}: {text}.")

    def to_dict(self) -> dict:
        return {**super().to_dict(), "fields": self.problems}


class SpecError(InvalidFields):
    """The job spec is invalid."""

    code = "bad_spec"
    what = "job spec"


class InvalidRequest(PaddleCloudError):
    """A request parameter (not the job spec) is wrong, e.g. a worker index out of range."""

    code = "bad_request"
    status = 400


class NotFound(PaddleCloudError):
    code = "not_found"
    status = 404


class JobNotFound(NotFound):
    def __init__(self, name: str):
        super().__init__(f"No job named '{name}'.")
        self.name = name


class JobExists(PaddleCloudError):
    code = "name_taken"
    status = 409

    def __init__(self, name: str):
        super().__init__(f"A job named '{name}' already exists; choose another name.")
        self.name = name


class QuotaExceeded(PaddleCloudError):
    code = "quota_exceeded"
    status = 403


class Forbidden(PaddleCloudError):
    code = "forbidden"
    status = 403


class BackendUnavailable(PaddleCloudError):
    """The job backend (the cluster, the local state folder) cannot be reached."""

    code = "backend_unavailable"
    status = 503


class NoNamespace(BackendUnavailable):
    """No Kubernetes namespace name can be made for a user from the namespace template,
    so their jobs and quota cannot be reached."""

    def __init__(self, username: str, name: str, template: str):
        super().__init__(f"No namespace name can be made for user '{username}': '{name}' (from the template "
                         f"'{template}') is not a valid namespace name.")
        self.username = username
