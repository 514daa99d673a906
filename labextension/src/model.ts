/**
 * The user's jobs and quota, polled while the page is visible; the panel, the status
 * bar and every job view read this one model instead of polling on their own.
 */

import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { PaddleApi } from './api';
import { describeError } from './errors';
import { IJob, IQuotaReport } from './types';

export const POLL_INTERVAL_MS = 3000;

export class JobsModel implements IDisposable {
  /** Newest first. */
  jobs: IJob[] = [];
  quota: IQuotaReport | null = null;
  /** A sentence when the last refresh failed. */
  error: string | null = null;
  /** True once the first answer (or error) came back. */
  loaded = false;

  private readonly poll: Poll;
  private readonly changedSignal = new Signal<this, void>(this);
  private disposed = false;

  constructor(
    readonly api: PaddleApi,
    interval = POLL_INTERVAL_MS
  ) {
    this.poll = new Poll({
      name: 'paddlecloud:jobs',
      factory: () => this.fetch(),
      frequency: { interval, backoff: true, max: 60 * 1000 },
      standby: 'when-hidden'
    });
  }

  get changed(): ISignal<this, void> {
    return this.changedSignal;
  }

  get isDisposed(): boolean {
    return this.disposed;
  }

  job(name: string): IJob | undefined {
    return this.jobs.find(job => job.name === name);
  }

  /** Fetch now (after a submit or cancel), instead of at the next poll. */
  async refresh(): Promise<void> {
    try {
      await this.fetch();
    } catch {
      // fetch() recorded the error for the views; the poll keeps trying
    }
  }

  dispose(): void {
    if (!this.disposed) {
      this.disposed = true;
      this.poll.dispose();
      Signal.clearData(this);
    }
  }

  private async fetch(): Promise<void> {
    const [jobs, quota] = await Promise.allSettled([this.api.jobs(), this.api.quota()]);
    if (this.disposed) {
      return;
    }
    this.loaded = true;
    if (jobs.status === 'fulfilled') {
      this.jobs = [...jobs.value].sort((a, b) => (b.created ?? '').localeCompare(a.created ?? ''));
      this.error = null;
    } else {
      this.error = describeError(jobs.reason);
    }
    this.quota = quota.status === 'fulfilled' ? quota.value : null;
    this.changedSignal.emit();
    if (jobs.status === 'rejected') {
      throw jobs.reason; // lets the poll back off while the server is away
    }
  }
}
