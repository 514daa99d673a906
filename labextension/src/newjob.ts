/**
 * The "New job" dialog: a form generated from `GET /paddle/api/options`, checked as
 * the server checks (jobform.ts) while the user types, submitted with
 * `POST /paddle/api/jobs`. A refusal keeps the dialog open and shows the server's
 * words next to the fields it names (or above the buttons, e.g. a quota refusal).
 */

import { Dialog, showErrorMessage } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import { PaddleApi } from './api';
import { h } from './dom';
import { ApiError, describeError } from './errors';
import { FieldErrors, FormField, IFormValues, fieldErrors, initialValues, validateForm } from './jobform';
import { IJob, IOptions } from './types';

const LOCAL_IMAGE_CHOICE = 'this Python environment';

/** Ask for a job and start it; resolves to the started job, or null if the user closed the dialog. */
export async function startJobDialog(api: PaddleApi): Promise<IJob | null> {
  let options: IOptions;
  try {
    options = await api.options();
  } catch (error) {
    await showErrorMessage('Cannot start a Paddle job', describeError(error));
    return null;
  }
  const form = new JobForm(options);
  const dialog = new SubmitDialog(form, api);
  const result = await dialog.launch();
  return result.button.accept ? dialog.started : null;
}

/** Keeps itself open while the job is being submitted and when the server refuses it. */
class SubmitDialog extends Dialog<null> {
  started: IJob | null = null;
  private busy = false;

  constructor(
    private readonly form: JobForm,
    private readonly api: PaddleApi
  ) {
    super({
      title: 'New Paddle job',
      body: form,
      buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Launch' })],
      defaultButton: 1,
      focusNodeSelector: 'input[name="command"]'
    });
    this.addClass('pc-NewJobDialog');
  }

  resolve(index?: number): void {
    const launch = (index ?? 1) === 1;
    if (!launch) {
      if (!this.busy) {
        super.resolve(index);
      }
      return;
    }
    if (this.started) {
      super.resolve(1);
      return;
    }
    if (!this.busy) {
      void this.submit();
    }
  }

  reject(): void {
    if (!this.busy) {
      super.reject();
    }
  }

  private async submit(): Promise<void> {
    const checked = this.form.check();
    if (!checked) {
      return;
    }
    this.busy = true;
    this.form.setBusy(true);
    try {
      this.started = await this.api.submit(checked);
    } catch (error) {
      if (error instanceof ApiError) {
        const { fields, message } = fieldErrors(error);
        this.form.showErrors(fields, message);
      } else {
        this.form.showErrors({}, describeError(error));
      }
    } finally {
      this.busy = false;
      this.form.setBusy(false);
    }
    if (this.started) {
      this.resolve(1);
    }
  }
}

type Input = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

/** The form body: one labelled input per spec field, each with its own message line. */
export class JobForm extends Widget {
  private readonly inputs = new Map<FormField, Input>();
  private readonly datasetBoxes: HTMLInputElement[] = [];
  private readonly errorNodes = new Map<string, HTMLElement>();
  private readonly summary: HTMLElement;
  private touched = false;

  constructor(private readonly options: IOptions) {
    super();
    this.addClass('pc-JobForm');
    const values = initialValues(options);
    const b = options.bounds;
    const form = h('form', { attrs: { novalidate: '' } });
    form.addEventListener('submit', event => event.preventDefault());

    this.field(
      form,
      'name',
      'Name',
      this.text('name', values.name, 'generated if empty'),
      'Lowercase letters, digits and -; leave empty for a generated name.'
    );
    this.field(
      form,
      'command',
      'Command',
      this.text('command', values.command, 'python train.py --epochs 3'),
      "Run in your home folder on every worker, as given (write sh -c '...' for a shell)."
    );
    this.field(
      form,
      'workers',
      'Workers',
      this.number('workers', values.workers, b.workers.min, b.workers.max),
      `${b.workers.min} to ${b.workers.max}.`
    );
    this.field(
      form,
      'gpus_per_worker',
      'GPUs per worker',
      this.number('gpus_per_worker', values.gpus_per_worker, b.gpus_per_worker.min, b.gpus_per_worker.max),
      b.gpus_per_worker.max
        ? `${b.gpus_per_worker.min} to ${b.gpus_per_worker.max}.`
        : 'This deployment runs jobs on CPU only.'
    );
    this.field(form, 'cpu', 'CPU per worker', this.text('cpu', values.cpu, 'e.g. 2 or 500m'), `At most ${b.cpu.max}.`);
    this.field(
      form,
      'memory',
      'Memory per worker',
      this.text('memory', values.memory, 'e.g. 8Gi'),
      `At most ${b.memory.max}.`
    );

    const image = h('select', { attrs: { name: 'image' } });
    if (options.images.length) {
      for (const choice of options.images) {
        const option = h('option', { attrs: { value: choice.name }, text: choice.name, title: choice.description });
        option.selected = choice.name === values.image;
        image.append(option);
      }
    } else {
      // No choice offered: the image jobs run in (Kubernetes), or this Python environment (local).
      image.append(h('option', { attrs: { value: '' }, text: options.job_image || LOCAL_IMAGE_CHOICE }));
      image.disabled = true;
    }
    this.inputs.set('image', image);
    this.field(
      form,
      'image',
      'Image',
      image,
      !options.images.length && options.job_image ? 'Every job runs in this image here.' : ''
    );

    const datasets = h('div', { class: 'pc-Datasets' });
    if (options.datasets.length) {
      for (const choice of options.datasets) {
        const box = h('input', { attrs: { type: 'checkbox', name: 'datasets', value: choice.name } });
        this.datasetBoxes.push(box);
        datasets.append(
          h(
            'label',
            { title: choice.mount_path ? `mounted at ${choice.mount_path}` : '' },
            box,
            ` ${choice.name}`,
            choice.description ? h('small', { text: ` ${choice.description}` }) : null
          )
        );
      }
    } else {
      datasets.append(h('span', { class: 'pc-Hint', text: 'No shared datasets are configured here.' }));
    }
    this.field(form, 'datasets', 'Datasets', datasets, '');
    this.field(form, 'env', 'Environment', this.textarea('env', values.env, 'KEY=VALUE, one per line', 2), '');
    this.field(
      form,
      'max_runtime_seconds',
      'Max runtime (s)',
      this.text('max_runtime_seconds', values.max_runtime_seconds, 'no limit'),
      ''
    );
    this.field(
      form,
      'max_restarts',
      'Max restarts',
      this.text('max_restarts', values.max_restarts, "the site's default"),
      'Restart all workers together after a worker is lost or evicted; an error in your code is not retried.'
    );

    this.summary = h('p', { class: 'pc-JobForm-error', attrs: { role: 'alert' } });
    form.append(this.summary);
    this.node.append(form);
    form.addEventListener('input', () => {
      if (this.touched) {
        this.check(); // once Launch was pressed, messages follow the user's corrections
      }
    });
  }

  values(): IFormValues {
    const get = (field: FormField) => this.inputs.get(field)?.value ?? '';
    return {
      name: get('name'),
      command: get('command'),
      workers: get('workers'),
      gpus_per_worker: get('gpus_per_worker'),
      cpu: get('cpu'),
      memory: get('memory'),
      image: this.options.images.length ? get('image') : '',
      datasets: this.datasetBoxes.filter(box => box.checked).map(box => box.value),
      env: get('env'),
      max_runtime_seconds: get('max_runtime_seconds'),
      max_restarts: get('max_restarts')
    };
  }

  /** The spec to submit, or null after showing what is wrong. */
  check(): ReturnType<typeof validateForm>['spec'] {
    this.touched = true;
    const result = validateForm(this.values(), this.options);
    this.showErrors(result.errors ?? {}, result.errors ? 'Please correct the fields marked below.' : '');
    return result.spec;
  }

  showErrors(fields: FieldErrors, message: string): void {
    for (const [field, node] of this.errorNodes) {
      const problem = fields[field] ?? '';
      node.textContent = problem;
      node.parentElement?.classList.toggle('pc-mod-invalid', !!problem);
    }
    this.summary.textContent = message;
  }

  setBusy(busy: boolean): void {
    this.node.classList.toggle('pc-mod-busy', busy);
    if (busy) {
      this.summary.textContent = 'Launching…';
    }
  }

  private field(form: HTMLElement, name: FormField, label: string, input: HTMLElement, hint: string): void {
    const error = h('div', { class: 'pc-JobForm-fieldError', attrs: { 'data-field': name } });
    this.errorNodes.set(name, error);
    form.append(
      h(
        'div',
        { class: 'pc-JobForm-row', attrs: { 'data-field': name } },
        h('label', { class: 'pc-JobForm-label', text: label }),
        h(
          'div',
          { class: 'pc-JobForm-control' },
          input,
          hint ? h('div', { class: 'pc-Hint', text: hint }) : null,
          error
        )
      )
    );
  }

  private text(name: FormField, value: string, placeholder: string): HTMLInputElement {
    const input = h('input', {
      class: 'jp-mod-styled',
      attrs: { type: 'text', name, placeholder, autocomplete: 'off', spellcheck: 'false' }
    });
    input.value = value;
    this.inputs.set(name, input);
    return input;
  }

  private number(name: FormField, value: string, min: number, max: number): HTMLInputElement {
    // type=text on purpose: the browser must not swallow what the user typed before we can say what is wrong
    const input = this.text(name, value, `${min} to ${max}`);
    input.inputMode = 'numeric';
    return input;
  }

  private textarea(name: FormField, value: string, placeholder: string, rows: number): HTMLTextAreaElement {
    const input = h('textarea', {
      class: 'jp-mod-styled',
      attrs: { name, placeholder, rows: String(rows), spellcheck: 'false' }
    });
    input.value = value;
    this.inputs.set(name, input);
    return input;
  }
}
