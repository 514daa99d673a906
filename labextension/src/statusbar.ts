/** The status-bar item: how many of the user's jobs are running and the GPUs they hold. */

import { Widget } from '@lumino/widgets';

import { usageSummary } from './format';
import { paddleIcon } from './icons';
import { JobsModel } from './model';

export class JobsStatus extends Widget {
  private readonly text: HTMLSpanElement;

  constructor(
    private readonly model: JobsModel,
    onClick: () => void
  ) {
    super();
    this.addClass('pc-JobsStatus');
    this.addClass('jp-StatusBar-GroupItem');
    this.node.title = 'Paddle jobs: click to show the jobs panel';
    const icon = document.createElement('span');
    paddleIcon.element({ container: icon, tag: 'span', stylesheet: 'statusBar' });
    this.text = document.createElement('span');
    this.text.className = 'jp-StatusBar-TextItem';
    this.node.append(icon, this.text);
    this.node.addEventListener('click', onClick);
    model.changed.connect(this.render, this);
    this.render();
  }

  dispose(): void {
    this.model.changed.disconnect(this.render, this);
    super.dispose();
  }

  private render(): void {
    const { running, gpus, queued } = usageSummary(this.model.jobs);
    const jobs = running === 1 ? '1 job running' : `${running} jobs running`;
    const waiting = queued ? ` · ${queued} queued` : '';
    this.text.textContent = `${jobs} · ${gpus} GPU${gpus === 1 ? '' : 's'}${waiting}`;
  }
}
