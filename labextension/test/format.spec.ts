import { formatDuration, jobResources, jobTiming, quotaRows, usageSummary } from '../src/format';
import { IJob, IQuotaReport } from '../src/types';

function job(name: string, phase: IJob['phase'], workers: number, gpus: number): IJob {
  return {
    name, phase, workers, spec: { command: ['python'], gpus_per_worker: gpus }, reason: '', message: '',
    created: '2025-01-01T00:00:00Z', finished: null, worker_states: [], backend: 'local'
  };
}

describe('format', () => {
  it('counts unfinished jobs and the GPUs they hold for the status bar', () => {
    const jobs = [job('a', 'Running', 2, 4), job('b', 'Pending', 1, 1), job('c', 'Succeeded', 8, 8), job('d', 'Cancelled', 1, 1)];
    expect(usageSummary(jobs)).toEqual({ running: 2, gpus: 9 });
    expect(jobResources(jobs[0])).toBe('2 workers × 4 GPUs');
    expect(jobResources(job('e', 'Running', 1, 0))).toBe('1 worker × CPU');
  });

  it('writes durations compactly, and how long a job waited, runs or ran', () => {
    expect([5, 65, 3600 + 120, 90000].map(formatDuration)).toEqual(['5s', '1m 05s', '1h 02m', '1d 1h']);
    const start = Date.parse('2025-01-01T00:00:00Z');
    expect(jobTiming(job('a', 'Pending', 1, 0), start + 12000)).toBe('waiting 12s');
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
