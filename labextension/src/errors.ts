/**
 * Errors the panel shows. The server answers `{"error": code, "message": sentence}`
 * (400 `bad_spec` adds `fields`: field -> rule); anything else becomes a sentence here.
 */

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly fields: Record<string, string> = {}
  ) {
    super(message);
    this.name = 'ApiError';
  }

  /** From a non-2xx response: the server's own sentence when it sent one. */
  static async fromResponse(response: Response): Promise<ApiError> {
    let body: unknown = null;
    try {
      body = await response.json();
    } catch {
      // not JSON: a proxy's or the hub's error page
    }
    return ApiError.fromBody(response.status, response.statusText, body);
  }

  static fromBody(status: number, statusText: string, body: unknown): ApiError {
    if (body && typeof body === 'object') {
      const { error, message, fields } = body as Record<string, unknown>;
      if (typeof message === 'string' && message) {
        const named: Record<string, string> = {};
        if (fields && typeof fields === 'object') {
          for (const [key, value] of Object.entries(fields as Record<string, unknown>)) {
            named[key] = String(value);
          }
        }
        return new ApiError(status, typeof error === 'string' ? error : 'error', message, named);
      }
    }
    const reason = statusText ? ` (${statusText})` : '';
    return new ApiError(status, 'http_error', `The server answered with HTTP ${status}${reason}.`);
  }
}

/** One sentence for anything thrown at the panel. */
export function describeError(error: unknown): string {
  if (error instanceof ApiError) {
    return error.message;
  }
  if (error instanceof Error && error.name === 'NetworkError') {
    return 'The Jupyter server cannot be reached; check that it is still running.';
  }
  if (error instanceof Error && error.message) {
    return error.message.endsWith('.') ? error.message : `${error.message}.`;
  }
  return 'Something went wrong; see the browser console for details.';
}
