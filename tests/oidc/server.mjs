// The OpenID Connect provider of the login tests: oidc-provider (OpenID Certified) on 127.0.0.1
// (or the real node's bridge address, for the helm tier), with a login page of its own that
// checks passwords, and a `groups` claim.
//
//   node server.mjs <config.json>
//
// config.json: {"host": "127.0.0.1" (default) or an address in 198.18.0.0/15, "port": 0 or a port,
//               "issuer": "http://<host>:<port>",
//               "clients": [{"client_id", "client_secret", "redirect_uris": [...]}],
//               "users_file": "<users.json>"}
// users.json:  {"<name>": {"password": "...", "groups": ["..."], "email": "..."}}, read at every
//              login and every userinfo request, so a test changes a user's groups by rewriting it.
// It prints one line, "listening <url>", once it answers.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { randomBytes } from 'node:crypto';

import Provider from 'oidc-provider';

const config = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const users = () => JSON.parse(readFileSync(config.users_file, 'utf8'));

const provider = new Provider(config.issuer, {
  clients: config.clients.map((client) => ({
    ...client,
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_post',
  })),
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username'],
    email: ['email'],
    groups: ['groups'],
  },
  async findAccount(ctx, id) {
    const user = users()[id];
    if (!user) return undefined;
    return {
      accountId: id,
      async claims() {
        const now = users()[id] || { groups: [] };  // the directory as it is now
        return { sub: id, preferred_username: id, name: id, email: now.email || `${id}@paddlecloud.test`,
                 groups: now.groups || [] };
      },
    };
  },
  cookies: { keys: [randomBytes(32).toString('hex')] },
  features: { devInteractions: { enabled: false } },  // our own login page below, which checks passwords
  interactions: { url: (ctx, interaction) => `/interaction/${interaction.uid}` },
  ttl: { Session: 3600, Interaction: 600, Grant: 3600, AccessToken: 600, AuthorizationCode: 60, IdToken: 600 },
});
provider.proxy = false;

function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function loginPage(uid, clientId, error) {
  return `<!doctype html><html><head><title>Sign in - PaddleCloud test provider</title></head><body>
<h1>Sign in to continue to ${escapeHtml(clientId)}</h1>
${error ? `<p class="error" role="alert">${escapeHtml(error)}</p>` : ''}
<form method="post" action="/interaction/${uid}/login">
  <label>User name <input name="login" autocomplete="username" autofocus></label>
  <label>Password <input name="password" type="password" autocomplete="current-password"></label>
  <button type="submit">Sign in</button>
</form></body></html>`;
}

async function formBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) throw new Error('interaction mismatch');
  const { prompt, params, session } = details;
  if (prompt.name === 'consent') {  // the hub is a first-party client: grant what it asked for
    const grant = details.grantId ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    if (prompt.details.missingOIDCScope) grant.addOIDCScope(prompt.details.missingOIDCScope.join(' '));
    if (prompt.details.missingOIDCClaims) grant.addOIDCClaims(prompt.details.missingOIDCClaims);
    const grantId = await grant.save();
    return provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  }
  if (action === 'login' && req.method === 'POST') {
    const form = await formBody(req);
    const name = form.get('login') || '';
    const user = users()[name];
    if (user && user.password === form.get('password')) {
      return provider.interactionFinished(req, res, { login: { accountId: name } }, { mergeWithLastSubmission: false });
    }
    res.statusCode = 401;
    res.setHeader('Content-Type', 'text/html; charset=utf-8');
    return res.end(loginPage(uid, params.client_id, 'Wrong user name or password.'));
  }
  res.setHeader('Content-Type', 'text/html; charset=utf-8');
  return res.end(loginPage(uid, params.client_id, ''));
}

const handler = provider.callback();
const server = createServer(async (req, res) => {
  const match = /^\/interaction\/([^/?]+)(?:\/(login))?(?:\?|$)/.exec(req.url);
  if (!match) return handler(req, res);
  try {
    return await interaction(req, res, match[1], match[2]);
  } catch (err) {
    console.error(err);
    res.statusCode = 400;
    res.setHeader('Content-Type', 'text/plain; charset=utf-8');
    return res.end(`This sign-in could not continue: ${err.message}. Start again from the hub.`);
  }
});
const host = config.host || '127.0.0.1';
server.listen(config.port, host, () => {
  console.log(`listening http://${host}:${server.address().port}`);
});
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
