/**
 * Follows a job's log over `GET /paddle/api/jobs/{name}/logs?follow=1` (server-sent
 * events: one `data:` event per line, `event: end` with {phase, reason, message} when
 * the job is over, `: keep-alive` comments while idle) and reconnects when the
 * connection drops, without losing or repeating a line.
 *
 * How a reconnect resumes: one connection carries every worker's lines (a job of
 * N workers needs one connection, not N: browsers allow about six per host), each
 * line of a multi-worker job prefixed `[worker-I] `. The server keeps each worker's
 * own order but interleaves workers as lines arrive, so the follower counts the
 * lines it has handed on *per worker*. A reconnect asks for the whole log again
 * (no `tail`) and skips, for each worker, as many lines as were already handed on.
 * Worker logs only grow while a job lives, so the first `received[w]` lines of
 * worker `w` on the new connection are exactly the ones already shown. The price is
 * that a reconnect re-transfers what was already received (the screen does not
 * re-render it); `?tail=N` cannot resume instead, because the client does not know
 * how many lines a worker has written while it was away.
 *
 * Pure apart from timers: the connection is a function handed in, so tests drive it.
 */

import { ApiError } from './errors';
import { SseParser } from './sse';

export interface ILogLine {
  worker: number;
  text: string;
}

export interface IEndInfo {
  phase: string;
  reason: string;
  message: string;
}

export type FollowState = 'connecting' | 'live' | 'reconnecting' | 'ended' | 'failed' | 'stopped';

/** Opens one log stream; resolves to its body as text chunks, or throws (ApiError for HTTP errors). */
export type OpenStream = (signal: AbortSignal) => Promise<AsyncIterable<string>>;

export interface IFollowerOptions {
  /** How many workers the job has: decides whether lines carry a `[worker-I] ` prefix. */
  workers: number;
  open: OpenStream;
  onLines: (lines: ILogLine[]) => void;
  onEnd?: (end: IEndInfo) => void;
  onState?: (state: FollowState, detail: string) => void;
  /** Waits between attempts, in ms; the last one repeats. */
  retryDelays?: number[];
  /** A connection silent for this long (no line, no keep-alive) is dropped and reopened. */
  idleTimeoutMs?: number;
}

/** HTTP statuses after which trying again cannot help. */
const FINAL_STATUSES = new Set([401, 403, 404]);
const PREFIX = /^\[worker-(\d+)\] /;

/** The worker a merged-log line belongs to, and its text without the prefix. */
export function splitWorker(line: string, workers: number): ILogLine {
  if (workers > 1) {
    const match = PREFIX.exec(line);
    if (match) {
      return { worker: Number(match[1]), text: line.slice(match[0].length) };
    }
  }
  return { worker: 0, text: line };
}

export class LogFollower {
  /** Lines handed on so far, per worker: what a reconnect skips. */
  readonly received: number[] = [];
  private state: FollowState = 'connecting';
  private stopper = new AbortController();
  private readonly retryDelays: number[];
  private readonly idleTimeoutMs: number;
  private done: Promise<void> | null = null;

  constructor(private readonly options: IFollowerOptions) {
    this.retryDelays = options.retryDelays ?? [500, 1000, 2000, 5000, 10000];
    this.idleTimeoutMs = options.idleTimeoutMs ?? 45000; // the server sends a keep-alive every 15 s
  }

  get currentState(): FollowState {
    return this.state;
  }

  /** Start following; the promise settles when the log has ended, failed or been stopped. */
  start(): Promise<void> {
    if (!this.done) {
      this.done = this.run();
    }
    return this.done;
  }

  /** Stop for good (the view closed). */
  stop(): void {
    if (!this.stopper.signal.aborted) {
      this.stopper.abort();
    }
  }

  private setState(state: FollowState, detail = ''): void {
    this.state = state;
    this.options.onState?.(state, detail);
  }

  private async run(): Promise<void> {
    let attempt = 0;
    for (;;) {
      if (this.stopper.signal.aborted) {
        this.setState('stopped');
        return;
      }
      this.setState(attempt === 0 ? 'connecting' : 'reconnecting', attempt === 0 ? '' : `attempt ${attempt + 1}`);
      let outcome: { ended: boolean; progressed: boolean };
      try {
        outcome = await this.connectOnce();
      } catch (error) {
        if (this.stopper.signal.aborted) {
          this.setState('stopped');
          return;
        }
        if (error instanceof ApiError && FINAL_STATUSES.has(error.status)) {
          this.setState('failed', error.message);
          return;
        }
        outcome = { ended: false, progressed: false };
      }
      if (outcome.ended) {
        this.setState('ended');
        return;
      }
      if (this.stopper.signal.aborted) {
        this.setState('stopped');
        return;
      }
      attempt = outcome.progressed ? 1 : attempt + 1;
      const delay = this.retryDelays[Math.min(attempt - 1, this.retryDelays.length - 1)];
      this.setState('reconnecting', `next attempt in ${Math.round(delay / 100) / 10} s`);
      await sleep(delay, this.stopper.signal);
    }
  }

  /** One connection: resolves when it closes; `ended` when the server sent `event: end`. */
  private async connectOnce(): Promise<{ ended: boolean; progressed: boolean }> {
    const connection = new AbortController();
    const abort = () => connection.abort();
    this.stopper.signal.addEventListener('abort', abort);
    let idle: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      clearTimeout(idle);
      idle = setTimeout(abort, this.idleTimeoutMs);
    };
    const seen: number[] = [];
    const parser = new SseParser();
    let progressed = false;
    try {
      arm();
      const chunks = await this.options.open(connection.signal);
      this.setState('live');
      for await (const chunk of chunks) {
        arm();
        progressed = true;
        const fresh: ILogLine[] = [];
        for (const item of parser.push(chunk)) {
          if (item.kind !== 'event') {
            continue; // keep-alive: the re-armed timer is all it is for
          }
          if (item.value.event === 'end') {
            this.deliver(fresh);
            this.options.onEnd?.(parseEnd(item.value.data));
            return { ended: true, progressed };
          }
          const line = splitWorker(item.value.data, this.options.workers);
          seen[line.worker] = (seen[line.worker] ?? 0) + 1;
          if (seen[line.worker] > (this.received[line.worker] ?? 0)) {
            this.received[line.worker] = seen[line.worker];
            fresh.push(line);
          }
        }
        this.deliver(fresh);
      }
      parser.end();
      return { ended: false, progressed };
    } finally {
      clearTimeout(idle);
      this.stopper.signal.removeEventListener('abort', abort);
      connection.abort(); // release the connection whichever way we left
    }
  }

  private deliver(lines: ILogLine[]): void {
    if (lines.length) {
      this.options.onLines(lines.splice(0));
    }
  }
}

function parseEnd(data: string): IEndInfo {
  try {
    const value = JSON.parse(data) as Partial<IEndInfo>;
    return { phase: value.phase ?? '', reason: value.reason ?? '', message: value.message ?? '' };
  } catch {
    return { phase: '', reason: '', message: '' };
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise(resolve => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}

/** A fetch body as text chunks (UTF-8, multi-byte characters kept whole across chunks). */
export async function* textChunks(body: ReadableStream<Uint8Array>): AsyncIterable<string> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        const rest = decoder.decode();
        if (rest) {
          yield rest;
        }
        return;
      }
      yield decoder.decode(value, { stream: true });
    }
  } finally {
    reader.cancel().catch(() => undefined); // stop the download if we left early
  }
}
