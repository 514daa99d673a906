/**
 * The JSON shapes of the PaddleCloud REST API (`/paddle/api`), as the server's
 * `Job.to_dict()`, `JobOptions.to_dict()` and `QuotaReport.to_dict()` write them.
 */

export type Phase = 'Queued' | 'Pending' | 'Running' | 'Succeeded' | 'Failed' | 'Cancelled';

export const FINISHED_PHASES: ReadonlySet<string> = new Set(['Succeeded', 'Failed', 'Cancelled']);

export interface IWorkerState {
  index: number;
  phase: Phase;
  exit_code: number | null;
  reason: string;
}

export interface IJobSpec {
  name?: string | null;
  command: string[];
  workers?: number;
  gpus_per_worker?: number;
  cpu?: string;
  memory?: string;
  image?: string | null;
  datasets?: string[];
  env?: Record<string, string>;
  max_runtime_seconds?: number | null;
  /** Restarts of all workers together after a lost, killed or evicted worker; null: the site's default. */
  max_restarts?: number | null;
}

export interface IJob {
  name: string;
  phase: Phase;
  workers: number;
  spec: IJobSpec;
  reason: string;
  message: string;
  created: string | null;
  finished: string | null;
  worker_states: IWorkerState[];
  backend: string;
  /** What code the job ran (digest, files, size), once the server records it. */
  code?: ICodeRecord | null;
  /** Where the job's outputs are, once the server records it. */
  outputs?: IOutputsRecord | null;
  /** Where a Queued job stands in line (`jobs.QueueState`); null otherwise. */
  queue?: IQueueState | null;
  /** 1 first, 2 after the first restart or requeue (`Job.attempt`). */
  attempt?: number;
  /** Restarts of all workers together so far. */
  restarts?: number;
  max_restarts?: number;
  /** Why the last restart (or requeue) happened, in words; '' before any. */
  last_restart_reason?: string;
  /** Times the queue (Kueue) sent the job back after it started: attempts, not restarts spent. */
  requeues?: number;
  /** When the last restart (or requeue) happened (ISO), where known. */
  last_restart_at?: string | null;
  /** The step the current attempt resumed from (its checkpoint); null when not known. */
  resumed_from_step?: number | null;
}

/** Where a Queued job stands in line (`jobs.QueueState.to_dict()`). */
export interface IQueueState {
  queue: string;
  /** 1-based: 1 starts next. */
  position: number | null;
  ahead: number | null;
  waiting_for: string;
  /** ISO time; an estimate, computed as `estimate_basis` says. */
  estimated_start: string | null;
  estimate_basis: string;
}

/** What the server records of a job's code (`workspace.CodeSnapshot.record()`). */
export interface ICodeRecord {
  workdir: string;
  digest: string | null;
  files: number;
  bytes: number;
  /** The files were kept with the job: `paddlecloud code NAME` gets them back. */
  stored: boolean;
}

/** Where a job's outputs are (`jobs.outputs_record()`). */
export interface IOutputsRecord {
  path: string | null;
  /** The folder outlives the job's pods (it is on a volume the notebook sees). */
  kept: boolean;
  note: string;
}

export interface IChoice {
  name: string;
  description: string;
}

export interface IDatasetChoice extends IChoice {
  mount_path: string;
}

export interface IOptions {
  backend: string;
  images: IChoice[];
  datasets: IDatasetChoice[];
  bounds: {
    workers: { min: number; max: number };
    gpus_per_worker: { min: number; max: number };
    cpu: { max: string };
    memory: { max: string };
    max_restarts?: { min: number; max: number };
  };
  /** The image a job runs in when it names none and no list is offered ('' on the local backend). */
  job_image?: string;
  defaults: {
    workers: number;
    gpus_per_worker: number;
    cpu: string;
    memory: string;
    image: string | null;
    command: string[];
    max_restarts?: number;
  };
}

export const QUOTA_FIELDS = ['gpus', 'cpu', 'memory', 'pods', 'running_jobs'] as const;
export type QuotaField = (typeof QUOTA_FIELDS)[number];

export interface IQuotaReport {
  user: string;
  /** Only the limits that are set; a missing field is unlimited. */
  limits: Partial<Record<QuotaField, number | string>>;
  sources: Partial<Record<QuotaField, string>>;
  used: Record<QuotaField, number | string>;
  running: string[];
  gpu_hours: { '7d'?: number; '30d'?: number };
}

export function isFinished(job: Pick<IJob, 'phase'>): boolean {
  return FINISHED_PHASES.has(job.phase);
}
