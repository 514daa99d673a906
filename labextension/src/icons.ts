import { LabIcon } from '@jupyterlab/ui-components';

/** Two workers joined to a master: a distributed job. */
const svgstr = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <circle cx="12" cy="5" r="3"/>
    <circle cx="5" cy="18" r="3"/>
    <circle cx="19" cy="18" r="3"/>
    <path d="M11 8h2v3.2l5.2 3.9-1.2 1.6L12 13l-5 3.7-1.2-1.6L11 11.2z"/>
  </g>
</svg>`;

export const paddleIcon = new LabIcon({ name: 'paddlecloud:jobs', svgstr });
