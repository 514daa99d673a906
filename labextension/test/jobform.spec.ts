import { ApiError } from '../src/errors';
import { fieldErrors, initialValues, IFormValues, parseEnv, validateForm } from '../src/jobform';
import { compareAmounts, parseQuantity } from '../src/quantity';
import { joinCommand, splitCommand } from '../src/shlex';
import { IOptions } from '../src/types';

/** The options document of the local backend with two images and a dataset, as the server writes it. */
const OPTIONS: IOptions = {
  backend: 'kubernetes',
  images: [
    { name: 'paddle:3.3.1-gpu', description: 'GPU' },
    { name: 'paddle:3.3.1-cpu', description: 'CPU' }
  ],
  datasets: [{ name: 'mnist', description: 'MNIST', mount_path: '/datasets/mnist' }],
  bounds: {
    workers: { min: 1, max: 8 },
    gpus_per_worker: { min: 0, max: 8 },
    cpu: { max: '16' },
    memory: { max: '64Gi' }
  },
  defaults: {
    workers: 1,
    gpus_per_worker: 0,
    cpu: '1',
    memory: '2Gi',
    image: 'paddle:3.3.1-gpu',
    command: ['python', 'train.py', '--epochs', '3']
  }
};

function form(changes: Partial<IFormValues> = {}, options = OPTIONS): IFormValues {
  return { ...initialValues(options), ...changes };
}

function errors(changes: Partial<IFormValues>, options = OPTIONS) {
  return validateForm(form(changes, options), options).errors;
}

describe('validateForm', () => {
  it('turns the defaults into the spec the server gets', () => {
    const result = validateForm(form({ workers: '2', env: 'A=1\n# note\n\nB = x=y ' }), OPTIONS);
    expect(result.errors).toBeNull();
    expect(result.spec).toEqual({
      command: ['python', 'train.py', '--epochs', '3'],
      workers: 2,
      gpus_per_worker: 0,
      cpu: '1',
      memory: '2Gi',
      image: 'paddle:3.3.1-gpu',
      datasets: [],
      env: { A: '1', B: ' x=y' }
    });
  });

  it('leaves out the image where none are offered (the local backend) and sends a name only when given', () => {
    const local: IOptions = { ...OPTIONS, images: [], datasets: [], defaults: { ...OPTIONS.defaults, image: null } };
    const spec = validateForm(form({ name: 'resnet-3' }, local), local).spec;
    expect(spec).not.toHaveProperty('image');
    expect(spec?.name).toBe('resnet-3');
  });

  it('checks max restarts against the site maximum and starts from the site default', () => {
    const site: IOptions = {
      ...OPTIONS,
      bounds: { ...OPTIONS.bounds, max_restarts: { min: 0, max: 3 } },
      defaults: { ...OPTIONS.defaults, max_restarts: 1 }
    };
    expect(initialValues(site).max_restarts).toBe('1');
    expect(validateForm(form({}, site), site).spec?.max_restarts).toBe(1);
    expect(errors({ max_restarts: '4' }, site)).toEqual({ max_restarts: 'must be at most 3 here (got 4)' });
    expect(errors({ max_restarts: '-1' }, site)).toEqual({ max_restarts: 'must be at least 0 (got -1)' });
    expect(validateForm(form({ max_restarts: '' }, site), site).spec).not.toHaveProperty('max_restarts');
  });

  it('names each field against the deployment bounds, with the server wording', () => {
    expect(errors({ workers: '9', gpus_per_worker: '-1', cpu: '32', memory: '65Gi' })).toEqual({
      workers: 'must be at most 8 here (got 9)',
      gpus_per_worker: 'must be at least 0 (got -1)',
      cpu: 'must be at most 16 per worker here (got 32)',
      memory: 'must be at most 64Gi per worker here (got 65Gi)'
    });
    expect(errors({ workers: '0', gpus_per_worker: '1.5' })).toEqual({
      workers: 'must be at least 1 (got 0)',
      gpus_per_worker: "must be a whole number (got '1.5')"
    });
    expect(errors({ cpu: '16000m', memory: '64Gi' })).toBeNull(); // equal to the bound is fine
    expect(errors({ cpu: '16001m' })).toEqual({ cpu: 'must be at most 16 per worker here (got 16001m)' });
  });

  it('checks quantities, names, commands, env and runtime as JobSpec does', () => {
    expect(errors({ cpu: 'two', memory: '0' })).toEqual({
      cpu: "'two' is not a Kubernetes quantity (examples: 2, 500m, 4Gi)",
      memory: "must be greater than zero (got '0')"
    });
    expect(errors({ name: 'My_Job' })).toEqual({
      name: "must use only lowercase letters, digits and '-', start with a letter and end with a letter or digit (got 'My_Job')"
    });
    expect(errors({ name: 'a'.repeat(51) })).toEqual({ name: 'must be at most 50 characters (got 51)' });
    expect(errors({ command: '   ' })).toEqual({ command: 'must not be empty, e.g. python train.py' });
    expect(errors({ command: "python -c 'print(1)" })).toEqual({
      command: 'cannot be split into arguments (No closing quotation)'
    });
    expect(errors({ env: 'GOOD=1\n=bad' })).toEqual({ env: "line 2 must look like KEY=VALUE (got '=bad')" });
    expect(errors({ env: '1X=2' })).toEqual({ env: "'1X' is not a valid environment variable name" });
    expect(errors({ max_runtime_seconds: '0' })).toEqual({ max_runtime_seconds: 'must be at least 1 (got 0)' });
    expect(validateForm(form({ max_runtime_seconds: ' 3600 ' }), OPTIONS).spec?.max_runtime_seconds).toBe(3600);
  });

  it('refuses images and datasets the deployment does not offer', () => {
    expect(errors({ image: 'evil:latest', datasets: ['mnist', 'imagenet'] })).toEqual({
      image: "'evil:latest' is not offered here (choose one of: paddle:3.3.1-gpu, paddle:3.3.1-cpu)",
      datasets: 'unknown dataset imagenet (available: mnist)'
    });
  });
});

describe('fieldErrors', () => {
  it("puts the server's per-field rules next to the fields and the rest in the sentence", () => {
    const refused = new ApiError(400, 'bad_spec', 'Invalid job spec: workers: must be at most 4 here (got 6).', {
      workers: 'must be at most 4 here (got 6)'
    });
    expect(fieldErrors(refused)).toEqual({
      fields: { workers: 'must be at most 4 here (got 6)' },
      message: 'The server refused this job; see the fields marked below.'
    });
    const quota = new ApiError(
      403,
      'quota_exceeded',
      'Needs 4 GPUs; your quota is 2 and 2 are in use by job resnet-3.'
    );
    expect(fieldErrors(quota)).toEqual({ fields: {}, message: quota.message });
    const taken = new ApiError(409, 'name_taken', "A job named 'a' already exists; choose another name.");
    expect(fieldErrors(taken).fields).toEqual({ name: taken.message });
    const other = new ApiError(400, 'bad_spec', 'Invalid job spec: spec: must be a JSON object.', {
      spec: 'must be a JSON object'
    });
    expect(fieldErrors(other)).toEqual({ fields: {}, message: other.message });
  });
});

describe('quantities and command lines', () => {
  it('compares quantities exactly, whatever the suffix', () => {
    const q = parseQuantity;
    expect(compareAmounts(q('1Gi'), q('1073741824'))).toBe(0);
    expect(compareAmounts(q('1G'), q('1Gi'))).toBe(-1);
    expect(compareAmounts(q('0.5'), q('500m'))).toBe(0);
    expect(compareAmounts(q('1e3'), q('1k'))).toBe(0);
    expect(compareAmounts(q('1E'), q('1Ei'))).toBe(-1);
    expect(compareAmounts(q(' .5 '), q('500m'))).toBe(0);
    expect(() => q('5 Gi')).toThrow("'5 Gi' is not a Kubernetes quantity");
    expect(() => q('-1')).toThrow('is not a Kubernetes quantity');
  });

  it("splits and joins like Python's shlex", () => {
    expect(splitCommand(`python train.py --msg 'hello world' "a \\"b\\"" c\\ d`)).toEqual([
      'python',
      'train.py',
      '--msg',
      'hello world',
      'a "b"',
      'c d'
    ]);
    expect(splitCommand("sh -c 'echo $HOME'")).toEqual(['sh', '-c', 'echo $HOME']);
    expect(splitCommand('a\'\'b ""')).toEqual(['ab', '']);
    expect(() => splitCommand('trailing\\')).toThrow('No escaped character');
    expect(joinCommand(['python', 'train.py', '--msg', "it's here", ''])).toBe(
      `python train.py --msg 'it'"'"'s here' ''`
    );
    expect(splitCommand(joinCommand(['a b', "c'd", '$x']))).toEqual(['a b', "c'd", '$x']);
  });

  it('parses env text', () => {
    expect(parseEnv('')).toEqual({ value: {}, problem: null });
    expect(parseEnv('  K=v  \r\nL=').value).toEqual({ K: 'v', L: '' });
  });
});
