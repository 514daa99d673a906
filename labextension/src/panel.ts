/**
 * The left side panel "Paddle Jobs": the user's jobs (phase, workers × GPUs, age and
 * duration), a quota bar per limited resource, and how to start when there is nothing.
 * It redraws whenever the shared JobsModel changes (every few seconds).
 */

import { Widget } from '@lumino/widgets';

import { h, phaseBadge } from './dom';
import { isWaiting, jobDetail, jobResources, jobTiming, queueTitle, quotaRows, restartsLine } from './format';
import { paddleIcon } from './icons';
import { JobsModel } from './model';
import { IJob, IQuotaReport } from './types';

export interface IPanelActions {
  openJob: (name: string) => void;
  newJob: () => void;
}

export class JobsPanel extends Widget {
  private readonly quotaNode: HTMLElement;
  private readonly statusNode: HTMLElement;
  private readonly listNode: HTMLUListElement;
  private readonly items = new Map<string, HTMLLIElement>();

  constructor(
    private readonly model: JobsModel,
    private readonly actions: IPanelActions
  ) {
    super();
    this.id = 'paddlecloud-jobs';
    this.addClass('pc-JobsPanel');
    this.title.icon = paddleIcon;
    this.title.caption = 'Paddle Jobs';

    const newButton = h('button', { class: 'jp-mod-styled jp-mod-accept pc-NewJob', text: 'New job' });
    newButton.addEventListener('click', () => this.actions.newJob());
    const refresh = h('button', { class: 'jp-mod-styled pc-Refresh', title: 'Refresh now', text: '↻' });
    refresh.addEventListener('click', () => void this.model.refresh());
    this.quotaNode = h('section', { class: 'pc-Quota' });
    this.statusNode = h('div', { class: 'pc-JobsPanel-status' });
    this.listNode = h('ul', { class: 'pc-JobList' });
    this.node.append(
      h('header', { class: 'pc-JobsPanel-header' }, h('h2', { text: 'Paddle Jobs' }), refresh, newButton),
      this.quotaNode,
      this.statusNode,
      this.listNode
    );
    model.changed.connect(this.render, this);
    this.render();
  }

  dispose(): void {
    this.model.changed.disconnect(this.render, this);
    super.dispose();
  }

  private render(): void {
    renderQuota(this.quotaNode, this.model.quota);
    const jobs = this.model.jobs;
    this.statusNode.replaceChildren();
    if (this.model.error) {
      this.statusNode.append(h('p', { class: 'pc-Error', text: `Cannot list your jobs: ${this.model.error}` }));
    } else if (!this.model.loaded) {
      this.statusNode.append(h('p', { class: 'pc-Hint', text: 'Loading your jobs…' }));
    } else if (!jobs.length) {
      this.statusNode.append(emptyState());
    }
    this.renderList(jobs);
  }

  /** Keyed update: a job's row stays the same element while it lives, so clicks never miss. */
  private renderList(jobs: IJob[]): void {
    const now = Date.now();
    const names = new Set(jobs.map(job => job.name));
    for (const [name, item] of this.items) {
      if (!names.has(name)) {
        item.remove();
        this.items.delete(name);
      }
    }
    jobs.forEach((job, position) => {
      let item = this.items.get(job.name);
      if (!item) {
        item = h('li', { class: 'pc-JobItem', attrs: { 'data-job': job.name, tabindex: '0', role: 'button' } });
        const name = job.name;
        item.addEventListener('click', () => this.actions.openJob(name));
        item.addEventListener('keydown', event => {
          if (event.key === 'Enter' || event.key === ' ') {
            event.preventDefault();
            this.actions.openJob(name);
          }
        });
        this.items.set(job.name, item);
      }
      item.replaceChildren(...jobRow(job, now));
      if (this.listNode.children[position] !== item) {
        this.listNode.insertBefore(item, this.listNode.children[position] ?? null);
      }
    });
  }
}

function jobRow(job: IJob, now: number): Node[] {
  const time = jobTiming(job, now);
  const rows: Node[] = [
    h(
      'div',
      { class: 'pc-JobItem-top' },
      h('span', { class: 'pc-JobItem-name', text: job.name }),
      phaseBadge(job.phase)
    ),
    h('div', { class: 'pc-JobItem-meta' }, h('span', { text: jobResources(job) }), h('span', { text: time }))
  ];
  const detail = jobDetail(job);
  if (detail && (job.phase === 'Failed' || isWaiting(job))) {
    const title = job.phase === 'Queued' && job.queue ? queueTitle(job.queue) : undefined;
    rows.push(h('div', { class: 'pc-JobItem-message', text: detail, ...(title ? { title } : {}) }));
  }
  if (job.restarts || job.requeues) {
    rows.push(h('div', { class: 'pc-JobItem-restarts', text: `Restarted: ${restartsLine(job)}` }));
  }
  return rows;
}

function emptyState(): HTMLElement {
  return h(
    'div',
    { class: 'pc-Empty' },
    h('p', { text: 'You have no training jobs yet.' }),
    h('p', { text: 'Start one with New job above or the Paddle job card in the Launcher; from a terminal:' }),
    h('pre', { text: 'paddlecloud submit --workers 2 -- python train.py' }),
    h('p', { text: 'Jobs started from notebooks, the CLI or Python show up here too.' })
  );
}

function renderQuota(node: HTMLElement, report: IQuotaReport | null): void {
  node.replaceChildren();
  if (!report) {
    return;
  }
  const rows = quotaRows(report);
  const limited = rows.filter(row => row.fraction !== null);
  node.append(h('h3', { text: 'Quota' }));
  const unlimited = rows.filter(row => row.fraction === null).map(row => row.label);
  if (!limited.length) {
    node.append(h('p', { class: 'pc-Hint', text: 'No limits apply to you.' }));
  }
  for (const row of limited) {
    const percent = Math.min(100, Math.round((row.fraction ?? 0) * 100));
    const level = (row.fraction ?? 0) >= 1 ? 'full' : (row.fraction ?? 0) >= 0.8 ? 'high' : 'ok';
    const source = row.source ? ` (from ${row.source})` : '';
    node.append(
      h(
        'div',
        {
          class: 'pc-QuotaRow',
          attrs: { 'data-field': row.field },
          title: `${row.label}: ${row.used} of ${row.limit} in use${source}`
        },
        h('span', { class: 'pc-QuotaRow-label', text: row.label }),
        h(
          'span',
          { class: 'pc-QuotaBar' },
          h('span', { class: `pc-QuotaBar-fill pc-mod-${level}`, attrs: { style: `width: ${percent}%` } })
        ),
        h('span', { class: 'pc-QuotaRow-value', text: `${row.used} / ${row.limit}` })
      )
    );
  }
  if (limited.length && unlimited.length) {
    node.append(h('p', { class: 'pc-Hint', text: `Not limited: ${unlimited.join(', ')}.` }));
  }
  const week = report.gpu_hours?.['7d'];
  if (week !== undefined) {
    node.append(h('p', { class: 'pc-Hint', text: `GPU-hours in the last 7 days: ${week}` }));
  }
}
