/**
 * The one place the extension talks to the server: `/paddle/api/...` under the
 * Jupyter server's base URL (`/user/<name>/` behind JupyterHub), through
 * ServerConnection so the page's token and XSRF cookie go along.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { ApiError } from './errors';
import { textChunks } from './logstream';
import { IJob, IJobSpec, IOptions, IQuotaReport } from './types';

export class PaddleApi {
  constructor(readonly settings: ServerConnection.ISettings = ServerConnection.makeSettings()) {}

  /** The URL of `/paddle/api/<parts...>`, each part escaped. */
  url(...parts: string[]): string {
    return URLExt.join(this.settings.baseUrl, 'paddle/api', ...parts.map(encodeURIComponent));
  }

  async jobs(): Promise<IJob[]> {
    return (await this.request<{ jobs: IJob[] }>('GET', this.url('jobs'))).jobs;
  }

  job(name: string): Promise<IJob> {
    return this.request('GET', this.url('jobs', name));
  }

  submit(spec: IJobSpec): Promise<IJob> {
    return this.request('POST', this.url('jobs'), spec);
  }

  cancel(name: string): Promise<IJob> {
    return this.request('DELETE', this.url('jobs', name));
  }

  options(): Promise<IOptions> {
    return this.request('GET', this.url('options'));
  }

  quota(): Promise<IQuotaReport> {
    return this.request('GET', this.url('quota'));
  }

  /** Open the job's log as server-sent events (every worker, merged); the body as text chunks. */
  async openLogStream(name: string, signal: AbortSignal): Promise<AsyncIterable<string>> {
    const url = this.url('jobs', name, 'logs') + '?follow=1';
    const response = await ServerConnection.makeRequest(
      url,
      { method: 'GET', signal, headers: { Accept: 'text/event-stream' } },
      this.settings
    );
    if (!response.ok) {
      throw await ApiError.fromResponse(response);
    }
    if (!response.body) {
      throw new Error('This browser cannot read a streamed response');
    }
    return textChunks(response.body);
  }

  private async request<T>(method: string, url: string, body?: unknown): Promise<T> {
    const init: RequestInit = { method };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers = { 'Content-Type': 'application/json' };
    }
    const response = await ServerConnection.makeRequest(url, init, this.settings);
    if (!response.ok) {
      throw await ApiError.fromResponse(response);
    }
    return (await response.json()) as T;
  }
}
