/** How jobs, times and quotas read in the panel (pure). */

import { amountValue, formatMemory, parseQuantity } from './quantity';
import { ICodeRecord, IJob, IQueueState, IQuotaReport, QUOTA_FIELDS, QuotaField, isFinished } from './types';

/** "45s", "3m 12s", "2h 05m", "3d 4h". */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s}s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  }
  if (s < 86400) {
    return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
  }
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

function seconds(from: string | null, to: number): number | null {
  const start = from ? Date.parse(from) : NaN;
  return Number.isNaN(start) ? null : (to - start) / 1000;
}

/** "started 5m 02s ago", or "" when the server gave no time. */
export function jobAge(job: IJob, now: number): string {
  const age = seconds(job.created, now);
  return age === null ? '' : `${formatDuration(age)} ago`;
}

/** How long the job ran (until now if it still runs). */
export function jobDuration(job: IJob, now: number): string {
  const end = job.finished ? Date.parse(job.finished) : now;
  const length = seconds(job.created, Number.isNaN(end) ? now : end);
  return length === null ? '' : formatDuration(length);
}

/** Not running yet and not finished: waiting in line (Queued) or admitted and starting (Pending). */
export function isWaiting(job: Pick<IJob, 'phase'>): boolean {
  return job.phase === 'Queued' || job.phase === 'Pending';
}

/** "running 5m 02s", "waiting 12s" (Queued or Pending), "ran 3m 10s · 2h 05m ago". */
export function jobTiming(job: IJob, now: number): string {
  if (isFinished(job)) {
    const age = jobAge(job, now);
    return `ran ${jobDuration(job, now)}${age ? ` · ${age}` : ''}`;
  }
  return `${isWaiting(job) ? 'waiting' : 'running'} ${jobDuration(job, now)}`;
}

/** "14:05" in the browser's time zone. */
function clockTime(moment: Date): string {
  return `${String(moment.getHours()).padStart(2, '0')}:${String(moment.getMinutes()).padStart(2, '0')}`;
}

/**
 * Where a queued job stands, in one line: "Queued · position 2 · needs 4 more GPUs ·
 * starts ~14:05 (estimate)"; without an estimate, why there is none.
 */
export function queueLine(queue: IQueueState): string {
  const parts = ['Queued'];
  if (queue.position) {
    parts.push(`position ${queue.position}`);
  }
  if (queue.ahead && queue.position && queue.ahead !== queue.position - 1) {
    parts.push(`${plural(queue.ahead, 'job')} ahead`);
  }
  if (queue.waiting_for) {
    parts.push(`needs ${queue.waiting_for}`);
  }
  const start = queue.estimated_start ? new Date(queue.estimated_start) : null;
  if (start && !Number.isNaN(start.getTime())) {
    parts.push(`starts ~${clockTime(start)} (estimate)`);
  } else if (queue.estimate_basis) {
    parts.push(queue.estimate_basis);
  }
  return parts.join(' · ');
}

/** The hover text of a queue line: which queue, and how the estimate was made. */
export function queueTitle(queue: IQueueState): string {
  const basis = queue.estimated_start && queue.estimate_basis ? ` Estimated from ${queue.estimate_basis}.` : '';
  return `In ${queue.queue}.${basis}`;
}

/** The line under a job's name: where it stands while queued, else its message. */
export function jobDetail(job: IJob): string {
  return job.phase === 'Queued' && job.queue ? queueLine(job.queue) : job.message;
}

export function gpusPerWorker(job: IJob): number {
  return Number(job.spec?.gpus_per_worker ?? 0);
}

function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}

/** "2 workers × 1 GPU", "1 worker × CPU". */
export function jobResources(job: IJob): string {
  const gpus = gpusPerWorker(job);
  return `${plural(job.workers, 'worker')} × ${gpus ? plural(gpus, 'GPU') : 'CPU'}`;
}

/** What the status bar says: jobs started and not yet finished, the GPUs they hold, and the queued ones (which hold nothing). */
export function usageSummary(jobs: readonly IJob[]): { running: number; gpus: number; queued: number } {
  let running = 0;
  let gpus = 0;
  let queued = 0;
  for (const job of jobs) {
    if (job.phase === 'Queued') {
      queued++;
    } else if (!isFinished(job)) {
      running++;
      gpus += job.workers * gpusPerWorker(job);
    }
  }
  return { running, gpus, queued };
}

export interface IQuotaRow {
  field: QuotaField;
  label: string;
  used: string;
  limit: string;
  /** used / limit, 0..1 (more when over), or null when unlimited. */
  fraction: number | null;
  source: string;
}

const QUOTA_LABELS: Record<QuotaField, string> = {
  gpus: 'GPUs',
  cpu: 'CPU',
  memory: 'Memory',
  pods: 'Pods',
  running_jobs: 'Running jobs'
};

function amount(field: QuotaField, value: number | string): number {
  if (field === 'cpu' || field === 'memory') {
    try {
      return amountValue(parseQuantity(String(value)));
    } catch {
      return NaN;
    }
  }
  return Number(value);
}

function show(field: QuotaField, value: number | string): string {
  if (field === 'memory') {
    const bytes = amount(field, value);
    return Number.isNaN(bytes) ? String(value) : formatMemory(bytes);
  }
  return String(value);
}

/** One row per quota field, in the server's order: used, limit and how full. */
export function quotaRows(report: IQuotaReport): IQuotaRow[] {
  return QUOTA_FIELDS.map(field => {
    const limit = report.limits[field];
    const used = report.used[field] ?? 0;
    let fraction: number | null = null;
    if (limit !== undefined && limit !== null) {
      const most = amount(field, limit);
      const now = amount(field, used);
      fraction = most > 0 ? now / most : now > 0 ? Infinity : 0;
    }
    return {
      field,
      label: QUOTA_LABELS[field],
      used: show(field, used),
      limit: limit === undefined || limit === null ? 'unlimited' : show(field, limit),
      fraction,
      source: report.sources[field] ?? ''
    };
  });
}

/** "sha256:0123456789abcdef…" -> "0123456789ab": enough to tell two snapshots apart. */
export function shortDigest(digest: string | null | undefined): string {
  if (!digest) {
    return '';
  }
  return digest.slice(digest.indexOf(':') + 1).slice(0, 12);
}

/** 512 -> "512 B", 3481 -> "3.4 KiB" (binary units, as the server's quantity.human_bytes). */
export function formatBytes(count: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let size = Math.max(0, count);
  for (const unit of units) {
    if (size < 1024 || unit === units[units.length - 1]) {
      return unit === 'B' ? `${Math.round(size)} B` : `${size.toFixed(1)} ${unit}`;
    }
    size /= 1024;
  }
  return `${count} B`; // not reached
}

/** "12 files, 3.4 KiB". */
export function codeSummary(code: Pick<ICodeRecord, 'files' | 'bytes'>): string {
  return `${plural(code.files, 'file')}, ${formatBytes(code.bytes)}`;
}

/**
 * `path` relative to the server's root folder, as JupyterLab's file browser names it
 * ("" for the root itself), or null when the file browser cannot reach it.
 */
export function pathUnderRoot(path: string, serverRoot: string): string | null {
  const trim = (p: string) => p.replace(/\/+$/, '');
  const root = trim(serverRoot);
  const target = trim(path);
  if (!path.startsWith('/') || !serverRoot.startsWith('/')) {
    return null; // "~" or a relative path: nothing to compare with
  }
  if (target === root) {
    return '';
  }
  return target.startsWith(`${root}/`) ? target.slice(root.length + 1) : null;
}

/** The JupyterLab URL that opens the file browser at a folder under the server root. */
export function labTreeUrl(baseUrl: string, relative: string): string {
  const base = baseUrl.endsWith('/') ? baseUrl : `${baseUrl}/`;
  return `${base}lab/tree/${relative.split('/').map(encodeURIComponent).join('/')}`;
}

/** "1 of at most 2 (attempt 2: worker 1 was killed by signal 9)", "0 of at most 2; requeued once by the
 * queue (not counted) (attempt 2: preempted: ...)", or null when none were allowed or made. */
export function restartsLine(job: IJob): string | null {
  const restarts = job.restarts ?? 0;
  const requeues = job.requeues ?? 0;
  const most = job.max_restarts ?? job.spec?.max_restarts ?? 0;
  if (!restarts && !most && !requeues) {
    return null;
  }
  let line = `${restarts} of at most ${most}`;
  if (requeues) {
    const times = requeues === 1 ? 'once' : requeues === 2 ? 'twice' : `${requeues} times`;
    line += `; requeued ${times} by the queue (not counted)`;
  }
  if (!restarts && !requeues) {
    return line;
  }
  const attempt = job.attempt ?? restarts + requeues + 1;
  let why = job.last_restart_reason ? `: ${job.last_restart_reason}` : '';
  if (why && job.last_restart_at) {
    why += ` at ${clock(job.last_restart_at)}`;
  }
  const step = job.resumed_from_step;
  if (step) {
    why += `; resumed from step ${step}`;
  } else if (step === 0) {
    why += '; no checkpoint, started again from step 0';
  }
  return `${line} (attempt ${attempt}${why})`;
}

/** An ISO time as a status line says it: '14:02 UTC' (the text itself if it is no time), as
 * `timestamps.clock` does on the server. */
export function clock(iso: string): string {
  const moment = new Date(iso);
  return isNaN(moment.getTime()) ? iso : `${moment.toISOString().slice(11, 16)} UTC`;
}
