/**
 * A job in the main area: its phase and reason, each worker's state, what it runs,
 * its recorded code and output folder (when the server reports them), Cancel, and the
 * live log. Job state comes from the shared JobsModel; the log from a LogFollower.
 */

import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { PanelLayout, Widget } from '@lumino/widgets';

import { h, phaseBadge } from './dom';
import { describeError } from './errors';
import {
  codeSummary,
  gpusPerWorker,
  jobResources,
  jobTiming,
  labTreeUrl,
  pathUnderRoot,
  queueLine,
  queueTitle,
  restartsLine,
  shortDigest
} from './format';
import { paddleIcon } from './icons';
import { FollowState, LogFollower } from './logstream';
import { LogViewer } from './logview';
import { JobsModel } from './model';
import { joinCommand } from './shlex';
import { ICodeRecord, IJob, IOutputsRecord, isFinished } from './types';

const ENDINGS: Record<string, string> = {
  Succeeded: 'the job succeeded',
  Failed: 'the job failed',
  Cancelled: 'the job was cancelled'
};

export class JobView extends Widget {
  private job: IJob | null = null;
  private readonly info: Widget;
  private logs: LogViewer | null = null;
  private follower: LogFollower | null = null;
  private cancelling = false;
  private loadError: string | null = null;
  private shown = '';

  /**
   * @param openFolder shows a folder (relative to the server root) in the file browser;
   *   false when it cannot, and the output folder's link then opens JupyterLab at it.
   */
  constructor(
    readonly jobName: string,
    private readonly model: JobsModel,
    private readonly openFolder: (path: string) => boolean = () => false
  ) {
    super();
    this.addClass('pc-JobView');
    this.title.label = jobName;
    this.title.caption = `Paddle job ${jobName}`;
    this.title.icon = paddleIcon;
    this.title.closable = true;
    this.info = new Widget();
    this.info.addClass('pc-JobView-info');
    const layout = new PanelLayout(); // a flex column in CSS: the info on top, the log fills the rest
    layout.addWidget(this.info);
    this.layout = layout;
    model.changed.connect(this.onModelChanged, this);
    this.setJob(model.job(jobName) ?? null);
    void this.load();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.follower?.stop();
    this.model.changed.disconnect(this.onModelChanged, this);
    super.dispose();
  }

  /** The job straight from the server, for a job the model has not listed yet. */
  private async load(): Promise<void> {
    try {
      this.setJob(await this.model.api.job(this.jobName));
    } catch (error) {
      if (!this.job) {
        this.loadError = describeError(error);
        this.render();
      }
    }
  }

  private onModelChanged(): void {
    const job = this.model.job(this.jobName);
    if (job) {
      this.setJob(job);
    }
  }

  private setJob(job: IJob | null): void {
    if (this.isDisposed) {
      return;
    }
    if (job) {
      this.job = job;
      this.loadError = null;
      this.startLogs(job);
    }
    this.render();
  }

  private startLogs(job: IJob): void {
    if (this.logs) {
      return;
    }
    const logs = (this.logs = new LogViewer(job.name, job.workers));
    (this.layout as PanelLayout).addWidget(logs);
    this.follower = new LogFollower({
      workers: job.workers,
      open: signal => this.model.api.openLogStream(job.name, signal),
      onLines: lines => logs.append(lines),
      onEnd: end => {
        logs.setState(`Log complete: ${ENDINGS[end.phase] ?? 'the job ended'}.`, 'ended');
        void this.model.refresh();
      },
      onState: (state, detail) => showFollowState(logs, state, detail)
    });
    void this.follower.start();
  }

  /** Redraw when something changed; otherwise only the running time moves on. */
  private render(): void {
    const job = this.job;
    const key = JSON.stringify([job, this.cancelling, this.loadError]);
    if (key === this.shown && job) {
      const meta = this.info.node.querySelector('.pc-JobView-meta');
      if (meta) {
        meta.textContent = metaText(job, Date.now());
      }
      return;
    }
    this.shown = key;
    const node = this.info.node;
    node.replaceChildren();
    if (!job) {
      node.append(
        h('h1', { class: 'pc-JobView-title', text: this.jobName }),
        this.loadError
          ? h('p', { class: 'pc-Error', text: this.loadError })
          : h('p', { class: 'pc-Hint', text: 'Loading…' })
      );
      return;
    }
    const cancel = h('button', {
      class: 'jp-mod-styled jp-mod-warn pc-Cancel',
      text: this.cancelling ? 'Cancelling…' : 'Cancel job'
    });
    cancel.disabled = isFinished(job) || this.cancelling;
    cancel.addEventListener('click', () => void this.cancel());
    node.append(
      h(
        'div',
        { class: 'pc-JobView-header' },
        h('h1', { class: 'pc-JobView-title', text: job.name }),
        phaseBadge(job.phase),
        h('span', { class: 'pc-JobView-meta', text: metaText(job, Date.now()) }),
        cancel
      )
    );
    if (job.phase === 'Queued' && job.queue) {
      node.append(
        h('p', { class: 'pc-JobView-message pc-mod-queued', title: queueTitle(job.queue) }, queueLine(job.queue))
      );
    } else if (job.reason || job.message) {
      node.append(
        h(
          'p',
          { class: `pc-JobView-message pc-mod-${job.phase.toLowerCase()}` },
          job.reason ? h('b', { text: `${job.reason}: ` }) : null,
          job.message || ''
        )
      );
    }
    node.append(details(job, this.openFolder), workerTable(job));
  }

  private async cancel(): Promise<void> {
    const job = this.job;
    if (!job || isFinished(job)) {
      return;
    }
    const answer = await showDialog({
      title: `Cancel job ${job.name}?`,
      body: `All ${job.workers} worker${job.workers === 1 ? '' : 's'} will be stopped. This cannot be undone.`,
      buttons: [Dialog.cancelButton({ label: 'Keep running' }), Dialog.warnButton({ label: 'Cancel job' })]
    });
    if (!answer.button.accept) {
      return;
    }
    this.cancelling = true;
    this.render();
    try {
      this.setJob(await this.model.api.cancel(job.name));
      void this.model.refresh();
    } catch (error) {
      void showErrorMessage(`Could not cancel ${job.name}`, describeError(error));
    } finally {
      this.cancelling = false;
      this.render();
    }
  }
}

function metaText(job: IJob, now: number): string {
  return `${jobResources(job)} · ${jobTiming(job, now)}`;
}

function showFollowState(logs: LogViewer, state: FollowState, detail: string): void {
  switch (state) {
    case 'connecting':
      logs.setState('Connecting…', 'idle');
      break;
    case 'live':
      logs.setState('Live', 'live');
      break;
    case 'reconnecting':
      logs.setState(`Connection lost; reconnecting (${detail})…`, 'problem');
      break;
    case 'failed':
      logs.setState(`The log cannot be read: ${detail}`, 'problem');
      break;
    default:
      break; // 'ended' is shown by onEnd, with the phase; 'stopped' means the view closed
  }
}

function details(job: IJob, openFolder: (path: string) => boolean): HTMLElement {
  const spec = job.spec ?? { command: [] };
  const list = h('dl', { class: 'pc-JobView-details' });
  const add = (term: string, value: Node | string | null) => {
    if (value !== null && value !== '') {
      list.append(h('dt', { text: term }), h('dd', {}, value));
    }
  };
  add('Command', h('code', { text: joinCommand(spec.command ?? []) }));
  add('Per worker', `${gpusPerWorker(job)} GPU, ${spec.cpu ?? '?'} CPU, ${spec.memory ?? '?'} memory`);
  add('Image', spec.image ?? null);
  add('Datasets', spec.datasets?.length ? spec.datasets.join(', ') : null);
  const env = Object.entries(spec.env ?? {});
  add('Environment', env.length ? h('code', { text: env.map(([k, v]) => `${k}=${v}`).join(' ') }) : null);
  add('Max runtime', spec.max_runtime_seconds ? `${spec.max_runtime_seconds} s` : null);
  add('Restarts', restartsLine(job));
  add('Backend', job.backend || null);
  add('Code', job.code ? codeDetail(job.code, job.name) : null);
  add('Output folder', job.outputs ? outputsDetail(job.outputs, openFolder) : null);
  return list;
}

/** "12 files, 3.4 KiB · 0123456789ab · from ~/project": what the job ran. */
function codeDetail(code: ICodeRecord, name: string): HTMLElement {
  const digest = shortDigest(code.digest);
  return h(
    'span',
    { class: 'pc-Code' },
    codeSummary(code),
    digest ? ' · ' : null,
    digest ? h('code', { class: 'pc-Code-digest', title: code.digest ?? '', text: digest }) : null,
    code.workdir ? ' · from ' : null,
    code.workdir ? h('code', { text: code.workdir }) : null,
    code.stored
      ? h('span', { class: 'pc-Hint', title: `paddlecloud code ${name} gets the files back`, text: ' · kept' })
      : null
  );
}

/** The folder, a link that shows it in the file browser when it is under the server root, and
 *  the server's note when the folder does not outlive the job. */
function outputsDetail(outputs: IOutputsRecord, openFolder: (path: string) => boolean): HTMLElement | null {
  if (!outputs.path) {
    return outputs.note ? h('span', { class: 'pc-Hint', text: outputs.note }) : null;
  }
  const relative = outputs.kept ? pathUnderRoot(outputs.path, PageConfig.getOption('serverRoot')) : null;
  let folder: HTMLElement = h('code', { text: outputs.path });
  if (relative !== null) {
    const link = h(
      'a',
      {
        class: 'pc-Outputs-link',
        title: 'Show this folder in the file browser',
        attrs: { href: labTreeUrl(PageConfig.getBaseUrl(), relative), target: '_blank', rel: 'noopener' }
      },
      folder
    );
    link.addEventListener('click', event => {
      if (openFolder(relative)) {
        event.preventDefault();
      }
    });
    folder = link;
  }
  return h(
    'span',
    { class: 'pc-Outputs' },
    folder,
    !outputs.kept && outputs.note ? h('span', { class: 'pc-Hint', text: ` · ${outputs.note}` }) : null
  );
}

function workerTable(job: IJob): HTMLElement {
  const table = h('table', { class: 'pc-Workers' });
  table.append(
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        h('th', { text: 'Worker' }),
        h('th', { text: 'Phase' }),
        h('th', { text: 'Exit code' }),
        h('th', { text: 'Detail' })
      )
    )
  );
  const body = h('tbody');
  const states = job.worker_states?.length
    ? job.worker_states
    : Array.from({ length: job.workers }, (_, index) => ({ index, phase: job.phase, exit_code: null, reason: '' }));
  for (const state of states) {
    body.append(
      h(
        'tr',
        { attrs: { 'data-worker': String(state.index) } },
        h('td', { text: String(state.index) }),
        h('td', {}, phaseBadge(state.phase)),
        h('td', { text: state.exit_code === null || state.exit_code === undefined ? '' : String(state.exit_code) }),
        h('td', { text: state.reason || '' })
      )
    );
  }
  table.append(body);
  return table;
}
