// The OpenID Provider the tests sign in through: panva's OpenID-certified oidc-provider, with one
// client for the product, people read from a JSON file, and a sign-in page of its own.
//
// Started by tests/oidc_provider.py (`oidc_provider` fixture), one per pytest worker:
//   node provider.mjs            listens on a free port of 127.0.0.1 and prints one JSON line,
//                                {"issuer": ..., "kid": ...}, once it answers.
// Environment:
//   OIDC_ACCOUNTS   a JSON file {login: {"password", "sub", "claims": {...}}}, read at every
//                   sign-in and every claims request, so a test changes a person's groups at the
//                   provider by rewriting it.
//   OIDC_CLIENT_ID, OIDC_CLIENT_SECRET   the product's client (agentops / test-secret).
//   OIDC_ISSUER     the issuer to claim (default: this server's own URL). With OIDC_KID, a second
//                   provider can pose as the first: same issuer, same key id, another key.
//   OIDC_KID        the signing key's id (default: random).
//
// The client is registered as a `native` application only for its redirect URIs: RFC 8252 7.3
// lets a loopback redirect URI take any port, and the product's test servers choose theirs at run
// time. It authenticates with its secret at the token endpoint like any web client, and PKCE is
// required of it (a flow without a code_challenge is refused).

import { generateKeyPairSync, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';

import Provider from 'oidc-provider';

const SCOPES = ['openid', 'profile', 'email', 'groups'];

function accounts() {
  return JSON.parse(readFileSync(process.env.OIDC_ACCOUNTS, 'utf8'));
}

function accountBySub(sub) {
  return Object.values(accounts()).find((account) => account.sub === sub);
}

function escape(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function page(title, body) {
  return `<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>${escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main><h1>${escape(title)}</h1>${body}</main></body></html>`;
}

function loginPage(uid, error) {
  const alert = error ? `<p role="alert">${escape(error)}</p>` : '';
  return page('Test identity provider', `${alert}
<form method="post" action="/interaction/${escape(uid)}/login">
<p><label for="username">Username</label> <input id="username" name="username" autocomplete="username" required></p>
<p><label for="password">Password</label> <input id="password" name="password" type="password" autocomplete="current-password" required></p>
<p><button type="submit">Sign in to the provider</button></p>
</form>`);
}

async function formBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function html(res, status, body) {
  res.writeHead(status, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(body);
}

// The sign-in page: a person signs in with their login and password from OIDC_ACCOUNTS.
async function interaction(provider, req, res) {
  const details = await provider.interactionDetails(req, res);
  const { uid, prompt, params, session } = details;
  if (prompt.name === 'consent') {
    // The product is this provider's own client: what it asks for is granted without a page
    // (oidc-provider asks a native client's consent at every authorization).
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
    grant.addOIDCScope(params.scope);
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
    return;
  }
  if (prompt.name !== 'login') {
    html(res, 400, page('Unexpected prompt', `<p>${escape(prompt.name)}</p>`));
    return;
  }
  if (req.method === 'GET') {
    html(res, 200, loginPage(uid));
    return;
  }
  const form = await formBody(req);
  const account = accounts()[form.get('username') ?? ''];
  if (!account || account.password !== form.get('password')) {
    html(res, 401, loginPage(uid, 'Wrong username or password.'));
    return;
  }
  await provider.interactionFinished(
    req,
    res,
    { login: { accountId: account.sub } },
    { mergeWithLastSubmission: false },
  );
}

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const kid = process.env.OIDC_KID || randomUUID();
const jwk = { ...privateKey.export({ format: 'jwk' }), kid, use: 'sig', alg: 'RS256' };

const server = createServer();
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const issuer = process.env.OIDC_ISSUER || `http://127.0.0.1:${port}`;
  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: process.env.OIDC_CLIENT_ID || 'agentops',
        client_secret: process.env.OIDC_CLIENT_SECRET || 'test-secret',
        client_name: 'agentops',
        application_type: 'native',
        redirect_uris: ['http://127.0.0.1/oidc/callback/', 'http://localhost/oidc/callback/'],
        post_logout_redirect_uris: ['http://127.0.0.1/login/', 'http://localhost/login/'],
        token_endpoint_auth_method: 'client_secret_basic',
        id_token_signed_response_alg: 'RS256',
      },
    ],
    jwks: { keys: [jwk] },
    cookies: { keys: [randomUUID()] },
    scopes: SCOPES,
    claims: {
      openid: ['sub'],
      profile: ['preferred_username', 'name', 'given_name', 'family_name'],
      email: ['email', 'email_verified'],
      groups: ['groups'],
    },
    pkce: { required: () => true },
    features: {
      devInteractions: { enabled: false },
      rpInitiatedLogout: {
        enabled: true,
        async logoutSource(ctx, form) {
          ctx.body = page('Sign out of the test identity provider', `${form}
<p><button type="submit" form="op.logoutForm" value="yes" name="logout">Sign out of the provider</button></p>`);
        },
        async postLogoutSuccessSource(ctx) {
          ctx.body = page('Signed out of the test identity provider', '');
        },
      },
    },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    async findAccount(_ctx, sub) {
      if (!accountBySub(sub)) return undefined;
      return {
        accountId: sub,
        // Read again at each request: the test may have changed the person since sign-in.
        async claims() {
          return { sub, ...(accountBySub(sub)?.claims ?? {}) };
        },
      };
    },
    async renderError(ctx, out) {
      ctx.type = 'html';
      ctx.body = page('Identity provider error', Object.entries(out)
        .map(([key, value]) => `<p>${escape(key)}: ${escape(value)}</p>`).join(''));
    },
  });
  const callback = provider.callback();
  server.on('request', (req, res) => {
    if (req.url.startsWith('/interaction/')) {
      interaction(provider, req, res).catch((error) => {
        html(res, 500, page('Interaction failed', `<p>${escape(error.message)}</p>`));
      });
      return;
    }
    callback(req, res);
  });
  process.stdout.write(`${JSON.stringify({ issuer, kid, port })}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
