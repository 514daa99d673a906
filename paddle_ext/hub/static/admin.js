// The quota admin page: plain JS, no build step. Talks to the service's JSON API
// with the hub's OAuth cookie; writes carry the XSRF token the page was served with.
(function () {
  "use strict";
  const boot = JSON.parse(document.getElementById("boot").textContent);
  const FIELDS = boot.fields;
  const LABELS = { gpus: "GPUs", cpu: "CPU", memory: "Memory", pods: "Pods", running_jobs: "Running jobs" };
  const HELP = {
    gpus: "whole number, e.g. 4", cpu: "cores, e.g. 8 or 500m", memory: "e.g. 32Gi",
    pods: "whole number", running_jobs: "whole number",
  };
  const INT_FIELDS = new Set(["gpus", "pods", "running_jobs"]);
  const $ = (id) => document.getElementById(id);
  let state = null;      // the last overview
  let editing = null;    // {kind, name, revision}

  document.getElementById("hub-link").href = boot.hub + "home";

  function esc(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  function api(method, path, body) {
    return request(method, boot.api + path, body);
  }

  async function request(method, url, body) {
    // HubOAuth checks the XSRF token on every fetch() made with the cookie, reads included.
    const options = { method, headers: { Accept: "application/json", "X-XSRFToken": boot.xsrf }, credentials: "same-origin" };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, options);
    } catch (err) {
      return { ok: false, status: 0, data: { message: "The quota service cannot be reached; check your connection and try again." } };
    }
    let data = {};
    try { data = await response.json(); } catch (err) { data = { message: `The quota service answered HTTP ${response.status}.` }; }
    return { ok: response.ok, status: response.status, data };
  }

  function toast(text, warn) {
    const el = $("toast");
    el.textContent = text;
    el.className = "toast" + (warn ? " warn" : "");
    el.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { el.hidden = true; }, warn ? 9000 : 4000);
  }

  function limitText(value) {
    return value === null || value === undefined ? '<span class="unset">unlimited</span>' : esc(value);
  }

  // paddle_ext/grammars.json's quantity grammar (tests/unit/test_grammars.py checks they are the same).
  const QUANTITY = /^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$/;
  const SUFFIX_FACTORS = {
    n: 1e-9, u: 1e-6, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
    Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
  };

  function amount(text) {
    // Kubernetes quantity -> number, for the usage meter only.
    const m = QUANTITY.exec(String(text));
    if (!m) return NaN;
    const suffix = m[2];
    const factor = !suffix ? 1 : suffix in SUFFIX_FACTORS ? SUFFIX_FACTORS[suffix] : 10 ** Number(suffix.slice(1));
    return parseFloat(m[1]) * factor;
  }

  // Where a limit comes from, in words: "user", "group ml", "default" (saved in this panel)
  // or "site default" (the deployment's own, e.g. the chart's settings.default_quota).
  function sourceText(source) {
    return source === "site" ? "site default" : source.replace("group:", "group ");
  }

  function defaultCell(field, saved, site) {
    if (saved !== null && saved !== undefined) return `<td data-field="${field}">${limitText(saved)}</td>`;
    const from = site !== null && site !== undefined ? '<span class="src">site default</span>' : "";
    return `<td data-field="${field}">${limitText(site)}${from}</td>`;
  }

  function usageCell(field, used, limit, source) {
    const usedText = used === undefined || used === null ? "–" : esc(used);
    let meter = "";
    if (limit !== null && limit !== undefined && used !== undefined) {
      const ratio = amount(limit) > 0 ? Math.min(1, amount(used) / amount(limit)) : (amount(used) > 0 ? 1 : 0);
      if (!isNaN(ratio)) meter = `<span class="meter${ratio >= 1 ? " full" : ""}"><i style="width:${Math.round(ratio * 100)}%"></i></span>`;
    }
    const src = source ? `<span class="src">${esc(sourceText(source))}</span>` : "";
    return `<td data-field="${field}"><span class="value">${usedText} / ${limitText(limit)}</span>${meter}${src}</td>`;
  }

  function headRow(first, extra) {
    return `<tr><th>${first}</th>${FIELDS.map((f) => `<th>${LABELS[f]}</th>`).join("")}${extra || ""}<th></th></tr>`;
  }

  function render() {
    const d = state;
    $("default-table").innerHTML = headRow("") +
      `<tr data-default="1"><td class="name">Everyone</td>${FIELDS.map((f) => defaultCell(f, d.default.limits[f], (d.site_default || {})[f])).join("")}` +
      `<td><button data-edit="default:">Edit</button></td></tr>`;

    // With Kueue each group row carries its team queue's guaranteed and borrowed GPUs.
    const queued = d.groups.some((g) => "guaranteed_gpus" in g);
    const queueCells = (g) => !queued ? "" : !("guaranteed_gpus" in g) ? '<td data-field="queue"><span class="unset">no queue</span></td>'
      : `<td data-field="queue">${g.guaranteed_gpus === null ? "unlimited" : g.guaranteed_gpus} / ${g.borrowed_gpus === null ? "?" : g.borrowed_gpus}</td>`;
    $("groups-table").innerHTML = d.groups.length
      ? headRow("Group", (queued ? "<th>GPUs guaranteed / borrowed now</th>" : "") + "<th>Members</th>") + d.groups.map((g) =>
        `<tr data-group="${esc(g.group)}"><td class="name">${esc(g.group)}${g.in_hub ? "" : ' <span class="tag admin">not in hub</span>'}</td>` +
        FIELDS.map((f) => `<td data-field="${f}">${limitText(g.limits[f])}</td>`).join("") + queueCells(g) +
        `<td>${g.members.length ? g.members.map((m) => `<span class="tag">${esc(m)}</span>`).join("") : '<span class="unset">none</span>'}</td>` +
        `<td><button data-edit="groups:${esc(g.group)}">Edit</button></td></tr>`).join("")
      : '<tr><td class="hint">No hub groups yet. Create groups in the hub\'s admin page; they show up here.</td></tr>';

    const filter = $("filter").value.trim().toLowerCase();
    const users = d.users.filter((u) => !filter || u.user.toLowerCase().includes(filter) || u.groups.some((g) => g.toLowerCase().includes(filter)));
    $("users-table").innerHTML = headRow("User", "<th>GPU-hours 7d / 30d</th>") + users.map((u) => {
      const tags = (u.admin ? '<span class="tag admin">admin</span>' : "") + u.groups.map((g) => `<span class="tag">${esc(g)}</span>`).join("");
      const hours = u.gpu_hours && u.gpu_hours["7d"] !== undefined ? `${u.gpu_hours["7d"]} / ${u.gpu_hours["30d"]}` : "–";
      const warn = u.usage_error ? `<span class="src" title="${esc(u.usage_error)}">usage unavailable</span>` : "";
      return `<tr data-user="${esc(u.user)}"><td><span class="name">${esc(u.user)}</span><br>${tags}${warn}</td>` +
        FIELDS.map((f) => usageCell(f, (u.used || {})[f], u.limits[f], u.sources[f])).join("") +
        `<td data-field="gpu_hours">${hours}</td><td><button data-edit="users:${esc(u.user)}">Edit</button></td></tr>`;
    }).join("");
  }

  function renderOwn(u) {
    $("own").hidden = false;
    $("own-body").innerHTML = '<div class="own-grid">' + FIELDS.map((f) =>
      `<div class="stat" data-field="${f}"><span class="hint">${LABELS[f]}</span><b>${esc((u.used || {})[f] ?? 0)} / ${limitText(u.limits[f])}</b>` +
      `${u.sources[f] ? `<span class="src">from ${esc(sourceText(u.sources[f]))}</span>` : ""}</div>`).join("") +
      `<div class="stat"><span class="hint">GPU-hours 7d / 30d</span><b>${u.gpu_hours ? `${u.gpu_hours["7d"]} / ${u.gpu_hours["30d"]}` : "–"}</b></div></div>`;
  }

  async function load() {
    const result = boot.writer ? await api("GET", "") : await api("GET", "/users/" + encodeURIComponent(boot.user));
    if (!result.ok) {
      $("load-error").textContent = result.data.message || `Loading failed (HTTP ${result.status}).`;
      $("load-error").hidden = false;
      return false;
    }
    $("load-error").hidden = true;
    if (boot.writer) {
      state = result.data;
      $("admin").hidden = false;
      render();
    } else {
      renderOwn(result.data);
    }
    return true;
  }

  function openEditor(kind, name) {
    let values, revision, title, hint = "";
    let inherited = {};
    if (kind === "default") {
      values = state.default.limits; revision = state.default.revision; title = "Default quota";
      hint = "Applies to users whose groups and own settings leave a limit unset. Empty = the site default.";
      for (const f of FIELDS) {
        const site = (state.site_default || {})[f];
        if (site !== null && site !== undefined) inherited[f] = `site default: ${site}`;
      }
    } else if (kind === "groups") {
      const g = state.groups.find((x) => x.group === name);
      values = g.limits; revision = g.revision; title = `Group ${name}`;
      hint = `${g.members.length} member(s). A user gets the most generous value among their groups.`;
    } else {
      const u = state.users.find((x) => x.user === name);
      values = u.override; revision = u.revision; title = `User ${name}`;
      hint = "Overrides the user's groups and the default. Empty = inherit.";
      for (const f of FIELDS) if (u.sources[f] && u.sources[f] !== "user") inherited[f] = `inherits ${u.limits[f]} from ${sourceText(u.sources[f])}`;
    }
    editing = { kind, name, revision };
    $("edit-title").textContent = title;
    $("edit-hint").textContent = hint;
    $("edit-error").hidden = true;
    $("edit-fields").innerHTML = FIELDS.map((f) => {
      const v = values[f] === null || values[f] === undefined ? "" : values[f];
      const placeholder = inherited[f] || (kind === "users" ? "inherit (unlimited)" : "not set (unlimited)");
      return `<div class="field"><label for="f-${f}">${LABELS[f]}</label>` +
        `<input id="f-${f}" name="${f}" value="${esc(v)}" placeholder="${esc(placeholder)}" autocomplete="off"` +
        `${INT_FIELDS.has(f) ? ' inputmode="numeric"' : ""}>` +
        `<span class="help">${HELP[f]}</span><span class="problem" id="p-${f}"></span></div>`;
    }).join("");
    $("editor").showModal();
    $("f-gpus").focus();
  }

  async function save(event) {
    event.preventDefault();
    const body = { revision: editing.revision };
    for (const f of FIELDS) {
      const raw = $("f-" + f).value.trim();
      body[f] = raw === "" ? null : (INT_FIELDS.has(f) && /^[0-9]+$/.test(raw) ? Number(raw) : raw);
      $("f-" + f).classList.remove("invalid");
      $("p-" + f).textContent = "";
    }
    const path = editing.kind === "default" ? "/default" : `/${editing.kind}/${encodeURIComponent(editing.name)}`;
    $("edit-save").disabled = true;
    const result = await api("PUT", path, body);
    $("edit-save").disabled = false;
    if (!result.ok) {
      $("edit-error").textContent = result.data.message || `Saving failed (HTTP ${result.status}).`;
      $("edit-error").hidden = false;
      for (const [field, problem] of Object.entries(result.data.fields || {})) {
        if ($("f-" + field)) { $("f-" + field).classList.add("invalid"); $("p-" + field).textContent = problem; }
      }
      return;
    }
    $("editor").close();
    const what = editing.kind === "default" ? "the default quota" : `${editing.kind === "users" ? "user" : "group"} ${editing.name}`;
    if (result.data.sync_errors && result.data.sync_errors.length) {
      toast(`Saved ${what}, but applying it failed for: ${result.data.sync_errors.join("; ")}`, true);
    } else {
      toast(`Saved ${what}.`);
    }
    await load();
    const selector = editing.kind === "default" ? 'tr[data-default]' : `tr[data-${editing.kind === "users" ? "user" : "group"}="${CSS.escape(editing.name)}"]`;
    const row = document.querySelector(selector);
    if (row) { row.classList.add("flash"); setTimeout(() => row.classList.remove("flash"), 2100); }
  }

  // ------------------------------------------------------------ the cluster overview

  function ratioMeter(used, capacity) {
    const cap = amount(capacity), use = amount(used);
    if (!(cap > 0)) return "";
    const ratio = Math.min(1, use / cap);
    return `<span class="meter wide${ratio >= 1 ? " full" : ""}"><i style="width:${Math.round(ratio * 100)}%"></i></span>`;
  }

  function resourceCells(node) {
    return ["gpus", "cpu", "memory"].map((f) =>
      `<td data-field="${f}"><span class="value">${esc(node.used[f])} / ${esc(node.capacity[f])}</span>${ratioMeter(node.used[f], node.capacity[f])}</td>`).join("");
  }

  function renderCapacity(capacity) {
    $("capacity-source").textContent = capacity.source === "kubernetes"
      ? "nodes and their pods' requests (notebooks included)" : "this machine; used = the running jobs' requests";
    if (capacity.error) {
      $("overview-error").textContent = capacity.error;
      $("overview-error").hidden = false;
    }
    const rows = capacity.nodes.map((n) =>
      `<tr data-node="${esc(n.name)}"><td><span class="name">${esc(n.name)}</span>${n.schedulable ? "" : ' <span class="tag admin">cordoned</span>'}</td>${resourceCells(n)}</tr>`);
    if (capacity.total) rows.push(`<tr class="total" data-node=""><td>Total</td>${resourceCells(capacity.total)}</tr>`);
    $("capacity-table").innerHTML = "<tr><th>Node</th><th>GPUs used / capacity</th><th>CPU</th><th>Memory</th></tr>" + rows.join("");
  }

  function renderJobs(jobs) {
    $("jobs-table").innerHTML = jobs.length
      ? "<tr><th>User</th><th>Job</th><th>Phase</th><th>Workers</th><th>GPUs</th><th>CPU</th><th>Memory</th><th>Age</th><th></th></tr>" +
        jobs.map((j) => {
          const key = `${j.user}/${j.name}`;
          return `<tr data-job="${esc(key)}"><td>${esc(j.user)}</td><td class="name">${esc(j.name)}</td><td>${esc(j.phase)}</td>` +
            `<td>${j.workers}</td><td>${j.gpus}</td><td>${esc(j.cpu)}</td><td>${esc(j.memory)}</td><td title="${esc(j.created || "")}">${esc(j.age)}</td>` +
            `<td><button type="button" class="danger" data-cancel="${esc(key)}">Cancel</button></td></tr>`;
        }).join("")
      : '<tr><td class="hint">No job is running.</td></tr>';
  }

  function renderQueues(section) {
    $("queues").hidden = !section;
    if (!section) return;
    $("queues-error").textContent = section.error || "";
    $("queues-error").hidden = !section.error;
    const gpus = (n) => n === null ? "unlimited" : n;
    $("queues-table").innerHTML = section.rows.length
      ? "<tr><th>Queue</th><th>For</th><th>GPUs guaranteed</th><th>In use</th><th>Borrowed</th><th>Idle</th><th>Admitted</th><th>Pending</th></tr>" +
        section.rows.map((q) => `<tr data-queue="${esc(q.name)}"><td class="name">${esc(q.name)}</td><td>${esc(q.kind)} ${esc(q.owner)}</td>` +
          `<td data-field="guaranteed">${gpus(q.guaranteed_gpus)}</td><td data-field="used">${q.used_gpus}</td>` +
          `<td data-field="borrowed">${q.borrowed_gpus}</td><td data-field="idle">${q.idle_gpus === null ? "–" : q.idle_gpus}</td>` +
          `<td data-field="admitted">${q.admitted}</td><td data-field="pending">${q.pending}</td></tr>`).join("")
      : '<tr><td class="hint">No queue yet: teams with a quota and users who started a server get one.</td></tr>';
  }

  function renderHours(hours) {
    // Plain SVG: per row a 30-day bar with the 7-day bar over it.
    const rows = [];
    if (hours.users.length) rows.push({ section: "Users" });
    hours.users.forEach((u) => rows.push({ name: u.user, kind: "user", d7: u["7d"], d30: u["30d"] }));
    if (hours.groups.length) rows.push({ section: "Groups" });
    hours.groups.forEach((g) => rows.push({ name: g.group, kind: "group", d7: g["7d"], d30: g["30d"] }));
    const max = Math.max(1e-9, ...rows.filter((r) => !r.section).map((r) => Math.max(r.d30, r.d7)));
    const width = 900, left = 170, right = 190, rowHeight = 24;
    let y = 8;
    const parts = [];
    for (const r of rows) {
      if (r.section) { parts.push(`<text class="section" x="0" y="${y + 14}">${r.section}</text>`); y += rowHeight; continue; }
      const w30 = (width - left - right) * r.d30 / max, w7 = (width - left - right) * r.d7 / max;
      parts.push(`<g data-hours="${r.kind}:${esc(r.name)}"><text class="label" x="0" y="${y + 14}">${esc(r.name)}</text>` +
        `<rect class="bar30" x="${left}" y="${y + 3}" width="${w30.toFixed(1)}" height="14" rx="3"></rect>` +
        `<rect class="bar7" x="${left}" y="${y + 6}" width="${w7.toFixed(1)}" height="8" rx="2"></rect>` +
        `<text class="value" x="${width - right + 10}" y="${y + 14}">${r.d7} (7d) / ${r.d30} (30d)</text></g>`);
      y += rowHeight;
    }
    const legend = `<g><rect class="bar7" x="${left}" y="${y + 6}" width="14" height="8"></rect><text class="value" x="${left + 20}" y="${y + 14}">last 7 days</text>` +
      `<rect class="bar30" x="${left + 110}" y="${y + 3}" width="14" height="14"></rect><text class="value" x="${left + 130}" y="${y + 14}">last 30 days</text></g>`;
    $("hours-chart").innerHTML = rows.length
      ? `<svg viewBox="0 0 ${width} ${y + 24}" role="img" aria-label="GPU-hours per user and group">${parts.join("")}${legend}</svg>`
      : '<p class="hint">No users yet.</p>';
  }

  async function loadOverview() {
    const result = await request("GET", boot.overview);
    if (!result.ok) {
      $("overview-error").textContent = result.data.message || `Loading the overview failed (HTTP ${result.status}).`;
      $("overview-error").hidden = false;
      return;
    }
    $("overview-error").hidden = true;
    renderCapacity(result.data.capacity);
    renderJobs(result.data.jobs);
    renderQueues(result.data.queues);
    renderHours(result.data.gpu_hours);
    for (const e of result.data.errors) toast(`Jobs of ${e.user} could not be read: ${e.message}`, true);
  }

  async function cancelJob(key) {
    const [user, ...rest] = key.split("/");
    const name = rest.join("/");
    if (!window.confirm(`Cancel job ${name} of ${user}? Its workers are stopped now.`)) return;
    const result = await request("DELETE", boot.jobs + encodeURIComponent(user) + "/" + encodeURIComponent(name));
    if (!result.ok) {
      toast(result.data.message || `Cancelling failed (HTTP ${result.status}).`, true);
      return;
    }
    toast(`Cancelled ${name} of ${user}.`);
    await loadOverview();
  }

  document.addEventListener("click", (event) => {
    const cancel = event.target.closest("[data-cancel]");
    if (cancel) { cancelJob(cancel.dataset.cancel); return; }
    const target = event.target.closest("[data-edit]");
    if (!target) return;
    const [kind, ...rest] = target.dataset.edit.split(":");
    openEditor(kind, rest.join(":"));
  });
  $("edit-form").addEventListener("submit", save);
  $("edit-cancel").addEventListener("click", () => $("editor").close());
  $("filter").addEventListener("input", () => state && render());
  $("overview-refresh").addEventListener("click", () => loadOverview());
  load().then((ok) => {
    if (ok && boot.writer) {
      loadOverview();
      setInterval(() => { if (!document.hidden) loadOverview(); }, 10000);
    }
  });
})();
