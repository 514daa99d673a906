/**
 * The "New job" form: its fields from `GET /paddle/api/options`, and the same checks
 * the server makes (JobSpec's rules in `paddle_ext/spec.py`, the deployment's bounds
 * in `paddle_ext/options.py`, the launcher's command and env parsing), with the same
 * words, so most mistakes are caught before a round trip. The server still checks
 * everything; its per-field answer is shown the same way (see `fieldErrors`).
 */

import { ApiError } from './errors';
import { QuantityError, compareAmounts, parseQuantity } from './quantity';
import { SplitError, joinCommand, splitCommand } from './shlex';
import { IJobSpec, IOptions } from './types';

export const FORM_FIELDS = [
  'name',
  'command',
  'workers',
  'gpus_per_worker',
  'cpu',
  'memory',
  'image',
  'datasets',
  'env',
  'max_runtime_seconds',
  'max_restarts'
] as const;
export type FormField = (typeof FORM_FIELDS)[number];

/** The form as the user typed it: every value text, except the picked datasets. */
export interface IFormValues {
  name: string;
  command: string;
  workers: string;
  gpus_per_worker: string;
  cpu: string;
  memory: string;
  image: string;
  datasets: string[];
  env: string;
  max_runtime_seconds: string;
  max_restarts: string;
}

/** Field -> what is wrong with it. Keys outside FORM_FIELDS (e.g. `spec`) are about the whole job. */
export type FieldErrors = Record<string, string>;

// The grammars of `paddle_ext/grammars.json` (test/grammars.spec.ts checks they are the same).
export const NAME_PATTERN = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;
export const MAX_NAME_LENGTH = 50;
export const ENV_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*$/;
const WHOLE_NUMBER = /^\s*-?[0-9]+\s*$/;

export function initialValues(options: IOptions): IFormValues {
  const d = options.defaults;
  return {
    name: '',
    command: joinCommand(d.command),
    workers: String(d.workers),
    gpus_per_worker: String(d.gpus_per_worker),
    cpu: d.cpu,
    memory: d.memory,
    image: d.image ?? '',
    datasets: [],
    env: '',
    max_runtime_seconds: '',
    max_restarts: d.max_restarts === undefined ? '' : String(d.max_restarts)
  };
}

/** The job spec the form describes, or what is wrong with it, field by field. */
export function validateForm(
  values: IFormValues,
  options: IOptions
): { spec: IJobSpec; errors: null } | { spec: null; errors: FieldErrors } {
  const errors: FieldErrors = {};
  const spec: IJobSpec = { command: [] };
  const fail = (field: FormField, problem: string | null) => {
    if (problem) {
      errors[field] = problem;
    }
  };

  const name = values.name.trim();
  if (name) {
    fail('name', checkName(name));
    spec.name = name;
  }

  try {
    spec.command = splitCommand(values.command);
    fail('command', checkCommand(spec.command));
  } catch (error) {
    if (!(error instanceof SplitError)) {
      throw error;
    }
    fail('command', `cannot be split into arguments (${error.message})`);
  }

  const bounds = options.bounds;
  const workers = wholeNumber(values.workers, bounds.workers.min, bounds.workers.max);
  fail('workers', workers.problem);
  spec.workers = workers.value;
  const gpus = wholeNumber(values.gpus_per_worker, bounds.gpus_per_worker.min, bounds.gpus_per_worker.max);
  fail('gpus_per_worker', gpus.problem);
  spec.gpus_per_worker = gpus.value;

  spec.cpu = values.cpu.trim();
  fail('cpu', checkQuantity(spec.cpu, bounds.cpu.max));
  spec.memory = values.memory.trim();
  fail('memory', checkQuantity(spec.memory, bounds.memory.max));

  const offered = options.images.map(image => image.name);
  if (offered.length) {
    spec.image = values.image;
    if (!offered.includes(values.image)) {
      fail('image', `'${values.image}' is not offered here (choose one of: ${offered.join(', ')})`);
    }
  }

  const known = new Set(options.datasets.map(dataset => dataset.name));
  const unknown = values.datasets.filter(dataset => !known.has(dataset));
  if (unknown.length) {
    const available = [...known].sort().join(', ') || 'none are configured';
    fail('datasets', `unknown dataset ${unknown.join(', ')} (available: ${available})`);
  }
  spec.datasets = [...values.datasets];

  const env = parseEnv(values.env);
  fail('env', env.problem);
  spec.env = env.value;

  if (values.max_runtime_seconds.trim()) {
    const runtime = wholeNumber(values.max_runtime_seconds, 1, null);
    fail('max_runtime_seconds', runtime.problem);
    spec.max_runtime_seconds = runtime.value;
  }

  if (values.max_restarts.trim()) {
    const restarts = wholeNumber(values.max_restarts, 0, options.bounds.max_restarts?.max ?? null);
    fail('max_restarts', restarts.problem);
    spec.max_restarts = restarts.value;
  }

  return Object.keys(errors).length ? { spec: null, errors } : { spec, errors: null };
}

/** What to show for a refused submit: the server's rule per field, and a sentence for the rest. */
export function fieldErrors(error: ApiError): { fields: FieldErrors; message: string } {
  const fields: FieldErrors = {};
  const others: string[] = [];
  for (const [field, rule] of Object.entries(error.fields)) {
    if ((FORM_FIELDS as readonly string[]).includes(field)) {
      fields[field] = rule;
    } else {
      others.push(`${field}: ${rule}`);
    }
  }
  if (error.code === 'name_taken') {
    fields.name = error.message;
  }
  const message =
    Object.keys(fields).length && !others.length
      ? 'The server refused this job; see the fields marked below.'
      : error.message;
  return { fields, message };
}

function checkName(name: string): string | null {
  if (name.length > MAX_NAME_LENGTH) {
    return `must be at most ${MAX_NAME_LENGTH} characters (got ${name.length})`;
  }
  if (!NAME_PATTERN.test(name)) {
    return (
      "must use only lowercase letters, digits and '-', start with a letter " +
      `and end with a letter or digit (got '${name}')`
    );
  }
  return null;
}

function checkCommand(argv: string[]): string | null {
  if (!argv.length) {
    return 'must not be empty, e.g. python train.py';
  }
  if (!argv[0].trim()) {
    return 'the program (first argument) must not be empty';
  }
  return null;
}

function wholeNumber(text: string, min: number, max: number | null): { value: number; problem: string | null } {
  if (!WHOLE_NUMBER.test(text)) {
    return { value: NaN, problem: `must be a whole number (got '${text.trim()}')` };
  }
  const value = parseInt(text, 10);
  if (value < min) {
    return { value, problem: `must be at least ${min} (got ${value})` };
  }
  if (max !== null && value > max) {
    return { value, problem: `must be at most ${max} here (got ${value})` };
  }
  return { value, problem: null };
}

function checkQuantity(text: string, most: string): string | null {
  try {
    const amount = parseQuantity(text);
    if (amount.num === BigInt(0)) {
      return `must be greater than zero (got '${text}')`;
    }
    if (compareAmounts(amount, parseQuantity(most)) > 0) {
      return `must be at most ${most} per worker here (got ${text})`;
    }
    return null;
  } catch (error) {
    if (error instanceof QuantityError) {
      return error.message;
    }
    throw error;
  }
}

/** KEY=VALUE lines (blank lines and # comments ignored), as the launcher widget reads them. */
export function parseEnv(text: string): { value: Record<string, string>; problem: string | null } {
  const value: Record<string, string> = {};
  const lines = text.split(/\r\n|\r|\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line || line.startsWith('#')) {
      continue;
    }
    const sep = line.indexOf('=');
    const key = sep < 0 ? '' : line.slice(0, sep).trim();
    if (!key) {
      return { value, problem: `line ${i + 1} must look like KEY=VALUE (got '${line}')` };
    }
    if (!ENV_NAME_PATTERN.test(key)) {
      return { value, problem: `'${key}' is not a valid environment variable name` };
    }
    value[key] = line.slice(sep + 1);
  }
  return { value, problem: null };
}
