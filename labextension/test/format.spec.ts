import {
  codeSummary,
  formatBytes,
  formatDuration,
  isWaiting,
  jobDetail,
  jobResources,
  jobTiming,
  labTreeUrl,
  pathUnderRoot,
  queueLine,
  queueTitle,
  quotaRows,
  restartsLine,
  shortDigest,
  usageSummary
} from '../src/format';
import { IJob, IQueueState, IQuotaReport } from '../src/types';

function job(name: string, phase: IJob['phase'], workers: number, gpus: number): IJob {
  return {
    name,
    phase,
    workers,
    spec: { command: ['python'], gpus_per_worker: gpus },
    reason: '',
    message: '',
    created: '2025-01-01T00:00:00Z',
    finished: null,
    worker_states: [],
    backend: 'local'
  };
}

describe('format', () => {
  it('counts unfinished jobs and the GPUs they hold for the status bar', () => {
    const jobs = [
      job('a', 'Running', 2, 4),
      job('b', 'Pending', 1, 1),
      job('c', 'Succeeded', 8, 8),
      job('d', 'Cancelled', 1, 1)
    ];
    expect(usageSummary(jobs)).toEqual({ running: 2, gpus: 9, queued: 0 });
    // A queued job holds nothing yet: counted apart, its GPUs not in use.
    expect(usageSummary([...jobs, job('q', 'Queued', 4, 8)])).toEqual({ running: 2, gpus: 9, queued: 1 });
    expect(jobResources(jobs[0])).toBe('2 workers × 4 GPUs');
    expect(jobResources(job('e', 'Running', 1, 0))).toBe('1 worker × CPU');
  });

  it('writes durations compactly, and how long a job waited, runs or ran', () => {
    expect([5, 65, 3600 + 120, 90000].map(formatDuration)).toEqual(['5s', '1m 05s', '1h 02m', '1d 1h']);
    const start = Date.parse('2025-01-01T00:00:00Z');
    expect(jobTiming(job('a', 'Pending', 1, 0), start + 12000)).toBe('waiting 12s');
    expect(jobTiming(job('a', 'Queued', 1, 0), start + 12000)).toBe('waiting 12s');
    expect(jobTiming(job('a', 'Running', 1, 0), start + 65000)).toBe('running 1m 05s');
    const done = { ...job('a', 'Succeeded', 1, 0), finished: '2025-01-01T00:03:10Z' };
    expect(jobTiming(done, start + 3600000)).toBe('ran 3m 10s · 1h 00m ago');
  });

  it('reads the quota report: fractions for set limits, unlimited otherwise', () => {
    const report: IQuotaReport = {
      user: 'alice',
      limits: { gpus: 4, memory: '16Gi', running_jobs: 1 },
      sources: { gpus: 'group:ml', memory: 'default', running_jobs: 'default' },
      used: { gpus: 2, cpu: '2', memory: '8Gi', pods: 2, running_jobs: 1 },
      running: ['resnet-3'],
      gpu_hours: { '7d': 2, '30d': 2 }
    };
    const rows = Object.fromEntries(quotaRows(report).map(row => [row.field, row]));
    expect(rows.gpus).toMatchObject({ used: '2', limit: '4', fraction: 0.5, source: 'group:ml' });
    expect(rows.memory).toMatchObject({ used: '8Gi', limit: '16Gi', fraction: 0.5 });
    expect(rows.running_jobs.fraction).toBe(1);
    expect(rows.cpu).toMatchObject({ limit: 'unlimited', fraction: null });
  });
});

describe("a job's code and outputs", () => {
  it('shows the code as files, size in human units and a short digest', () => {
    expect([0, 512, 1023, 1024, 3481, 5 * 2 ** 20, 3 * 2 ** 40].map(formatBytes)).toEqual([
      '0 B',
      '512 B',
      '1023 B',
      '1.0 KiB',
      '3.4 KiB',
      '5.0 MiB',
      '3.0 TiB'
    ]);
    expect(codeSummary({ files: 12, bytes: 3481 })).toBe('12 files, 3.4 KiB');
    expect(codeSummary({ files: 1, bytes: 10 })).toBe('1 file, 10 B');
    expect(shortDigest('sha256:0123456789abcdef0123')).toBe('0123456789ab');
    expect(shortDigest(null)).toBe('');
  });

  it('links an output folder under the server root into the file browser, and nothing outside it', () => {
    expect(pathUnderRoot('/home/jovyan/paddlecloud-outputs/job-1', '/home/jovyan')).toBe('paddlecloud-outputs/job-1');
    expect(pathUnderRoot('/home/jovyan/', '/home/jovyan')).toBe('');
    expect(pathUnderRoot('/home/jovyanx/out', '/home/jovyan')).toBeNull();
    expect(pathUnderRoot('/tmp/paddlecloud-outputs/job-1', '/home/jovyan')).toBeNull();
    expect(pathUnderRoot('/srv/out', '/')).toBe('srv/out');
    expect(pathUnderRoot('/home/me/out', '~')).toBeNull();
    expect(labTreeUrl('/user/alice/', 'paddlecloud-outputs/my job')).toBe(
      '/user/alice/lab/tree/paddlecloud-outputs/my%20job'
    );
    expect(labTreeUrl('/', '')).toBe('/lab/tree/');
  });

  it('says where a queued job stands: position, what it needs, an estimate marked as one', () => {
    const estimate = '2026-12-02T14:05:00Z';
    const at = new Date(estimate);
    const clock = `${String(at.getHours()).padStart(2, '0')}:${String(at.getMinutes()).padStart(2, '0')}`;
    const queue: IQueueState = {
      queue: "team vision's queue",
      position: 2,
      ahead: 1,
      waiting_for: '4 more GPUs',
      estimated_start: estimate,
      estimate_basis: 'the time limits of the jobs running and queued before it'
    };
    expect(queueLine(queue)).toBe(`Queued · position 2 · needs 4 more GPUs · starts ~${clock} (estimate)`);
    expect(queueTitle(queue)).toBe(
      "In team vision's queue. Estimated from the time limits of the jobs running and queued before it."
    );
    const unknown = {
      ...queue,
      position: 3,
      ahead: 5,
      estimated_start: null,
      estimate_basis: 'no estimate: job a has no time limit'
    };
    expect(queueLine(unknown)).toBe(
      'Queued · position 3 · 5 jobs ahead · needs 4 more GPUs · no estimate: job a has no time limit'
    );
    expect(queueTitle(unknown)).toBe("In team vision's queue.");
    expect(queueLine({ ...unknown, position: null, ahead: null, waiting_for: '', estimate_basis: '' })).toBe('Queued');

    const queued = { ...job('q', 'Queued', 1, 4), message: 'Waiting in line.', queue };
    expect(jobDetail(queued)).toBe(queueLine(queue));
    expect(jobDetail({ ...job('p', 'Pending', 1, 0), message: 'The workers are starting.' })).toBe(
      'The workers are starting.'
    );
    expect(
      [queued, job('p', 'Pending', 1, 0), job('r', 'Running', 1, 0), job('s', 'Succeeded', 1, 0)].map(isWaiting)
    ).toEqual([true, true, false, false]);
  });
});

describe('restartsLine', () => {
  it('says nothing where no restart was allowed or made, and the attempt and why once restarted', () => {
    expect(restartsLine(job('a', 'Running', 2, 0))).toBeNull();
    expect(restartsLine({ ...job('a', 'Running', 2, 0), max_restarts: 2, restarts: 0 })).toBe('0 of at most 2');
    expect(
      restartsLine({
        ...job('a', 'Running', 2, 0),
        max_restarts: 2,
        restarts: 1,
        attempt: 2,
        last_restart_reason: 'worker 1 was killed by signal 9'
      })
    ).toBe('1 of at most 2 (attempt 2: worker 1 was killed by signal 9)');
  });

  it('says when the restart happened and the step the attempt resumed from, where known', () => {
    const restarted = {
      ...job('a', 'Running', 2, 0),
      max_restarts: 3,
      restarts: 1,
      attempt: 2,
      last_restart_reason: 'worker 1 was evicted or preempted',
      last_restart_at: '2026-12-03T14:02:41Z'
    };
    expect(restartsLine({ ...restarted, resumed_from_step: 500 })).toBe(
      '1 of at most 3 (attempt 2: worker 1 was evicted or preempted at 14:02 UTC; resumed from step 500)'
    );
    expect(restartsLine({ ...restarted, resumed_from_step: 0, last_restart_at: null })).toBe(
      '1 of at most 3 (attempt 2: worker 1 was evicted or preempted; no checkpoint, started again from step 0)'
    );
  });

  it('counts a requeue by the queue as an attempt but not as a restart spent', () => {
    expect(
      restartsLine({
        ...job('a', 'Running', 2, 0),
        max_restarts: 0,
        restarts: 0,
        requeues: 1,
        attempt: 2,
        last_restart_reason: 'preempted: team b reclaimed its GPUs'
      })
    ).toBe(
      '0 of at most 0; requeued once by the queue (not counted) (attempt 2: preempted: team b reclaimed its GPUs)'
    );
    expect(restartsLine({ ...job('a', 'Running', 2, 0), max_restarts: 2, restarts: 1, requeues: 2 })).toBe(
      '1 of at most 2; requeued twice by the queue (not counted) (attempt 4)'
    );
  });
});
