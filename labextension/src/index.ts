/**
 * PaddleCloud Hub in JupyterLab: the "Paddle Jobs" side panel, a job view per job,
 * the "New job" dialog, a launcher card, palette commands and a status-bar item.
 * Everything talks to the notebook server's `/paddle/api` only.
 */

import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, WidgetTracker } from '@jupyterlab/apputils';
import { ILauncher } from '@jupyterlab/launcher';
import { IStatusBar } from '@jupyterlab/statusbar';

import { PaddleApi } from './api';
import { paddleIcon } from './icons';
import { JobView } from './jobview';
import { JobsModel } from './model';
import { startJobDialog } from './newjob';
import { JobsPanel } from './panel';
import { JobsStatus } from './statusbar';

const PLUGIN_ID = '@paddlecloud/jupyterlab-jobs:plugin';

export const CommandIDs = {
  newJob: 'paddlecloud:new-job',
  showJobs: 'paddlecloud:show-jobs',
  openJob: 'paddlecloud:open-job',
  /** JupyterLab's file browser command (the filebrowser extension may be disabled). */
  goToPath: 'filebrowser:go-to-path'
} as const;

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'A side panel for distributed PaddlePaddle training jobs: list, launch, watch logs, cancel.',
  autoStart: true,
  optional: [ILayoutRestorer, ILauncher, ICommandPalette, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    restorer: ILayoutRestorer | null,
    launcher: ILauncher | null,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null
  ) => {
    const api = new PaddleApi(app.serviceManager.serverSettings);
    const model = new JobsModel(api);
    const tracker = new WidgetTracker<MainAreaWidget<JobView>>({ namespace: 'paddlecloud-job' });

    const openJob = (name: string): MainAreaWidget<JobView> => {
      const open = tracker.find(widget => widget.content.jobName === name);
      if (open) {
        app.shell.activateById(open.id);
        return open;
      }
      const content = new JobView(name, model, path => {
        if (!app.commands.hasCommand(CommandIDs.goToPath)) {
          return false;
        }
        void app.commands.execute(CommandIDs.goToPath, { path });
        return true;
      });
      const widget = new MainAreaWidget({ content });
      widget.id = `paddlecloud-job-${name}`;
      widget.title.label = name;
      widget.title.icon = paddleIcon;
      widget.title.caption = content.title.caption;
      void tracker.add(widget);
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
      return widget;
    };

    const panel = new JobsPanel(model, {
      openJob: name => void app.commands.execute(CommandIDs.openJob, { name }),
      newJob: () => void app.commands.execute(CommandIDs.newJob)
    });
    app.shell.add(panel, 'left', { rank: 650 });

    app.commands.addCommand(CommandIDs.newJob, {
      label: 'New Paddle Job…',
      caption: 'Start a distributed PaddlePaddle training job',
      icon: args => (args.isPalette ? undefined : paddleIcon),
      execute: async () => {
        const job = await startJobDialog(api);
        if (job) {
          void model.refresh();
          openJob(job.name);
        }
        return job;
      }
    });
    app.commands.addCommand(CommandIDs.showJobs, {
      label: 'Show Paddle Jobs',
      caption: 'Show your training jobs and quota',
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.openJob, {
      label: args => `Paddle job ${String(args.name ?? '')}`,
      execute: args => openJob(String(args.name))
    });

    if (palette) {
      palette.addItem({ command: CommandIDs.newJob, category: 'PaddleCloud' });
      palette.addItem({ command: CommandIDs.showJobs, category: 'PaddleCloud' });
    }
    if (launcher) {
      launcher.add({ command: CommandIDs.newJob, category: 'Other', rank: 0 });
    }
    if (statusBar) {
      statusBar.registerStatusItem('paddlecloud:jobs-status', {
        item: new JobsStatus(model, () => app.shell.activateById(panel.id)),
        align: 'left',
        rank: 10,
        isActive: () => true
      });
    }
    if (restorer) {
      restorer.add(panel, 'paddlecloud-jobs');
      void restorer.restore(tracker, {
        command: CommandIDs.openJob,
        args: widget => ({ name: widget.content.jobName }),
        name: widget => widget.content.jobName
      });
    }
  }
};

export default plugin;
