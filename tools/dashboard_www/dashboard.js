// tools/dashboard_www/dashboard.js: the live flight dashboard.
//
// Draws the map (land.json) once, then applies every Server-Sent Event of /events to the
// DOM the moment it arrives (no animation, so the page never hides latency):
//   snapshot     {db, zones, positions, zone_alerts, progress}: replaces everything
//   positions    {rows, notified_at}: aircraft that moved, one <circle> per aircraft
//   zone_alerts  {rows, notified_at}: zone counts, <g class="zone crowded"> when crowded
//   zones        {zones}: the monitored boxes changed
//   progress     {flows}: every flow's state, lag and sdp_flow_progress() report
//   status       {db, error}: the dashboard lost (or regained) the database
// Every event carries sent_at (ms since the epoch, the server's clock); every row its
// updated_at (the flow transaction's time), from which the page measures commit -> page.
//
// State for tests and curious people: #db-state[data-state], #aircraft-count,
// #commit-to-page-ms (latest, with data-p50 and data-samples over the last 100), and
// window.sdpDashboard (the same figures, and the database states seen, with times).
'use strict';

(function () {
  const SVG_NS = 'http://www.w3.org/2000/svg';
  // Equirectangular, true to scale at 45 degrees north; the North Atlantic with the
  // great-circle routes between North America and Europe.
  const MAP = { west: -130, east: 30, south: 18, north: 70 };
  const K = 10;                                     // user units per degree of latitude
  const KX = K * Math.cos(45 * Math.PI / 180);      // and of longitude
  const px = (lon) => +((lon - MAP.west) * KX).toFixed(2);
  const py = (lat) => +((MAP.north - lat) * K).toFixed(2);
  const FULL_WIDTH = px(MAP.east);
  const VIEWS = {                                   // [west, east, south, north]
    atlantic: [MAP.west, MAP.east, MAP.south, MAP.north],
    europe: [-12, 22, 36, 60],
    america: [-125, -66, 24, 52],
  };
  const STALE_MS = 120000;
  const LATENCY_WINDOW = 100;

  const $ = (id) => document.getElementById(id);
  const svg = $('map');
  const layers = { zones: $('zones'), aircraft: $('aircraft'), emergencies: $('emergencies') };

  const aircraft = new Map();   // icao24 -> {row, dot, title, marker}
  const zones = new Map();      // zone -> {row, g, rect, label}
  const alerts = new Map();     // zone -> row of zone_alerts
  const flowRows = new Map();   // flow -> <tr>
  let k = 1;                    // current zoom: marks keep their size on screen

  const stats = {
    commitToPage: [],           // the last LATENCY_WINDOW samples, ms
    lastCommitToPageMs: null,
    p50: null,
    dbStates: [],               // {state, at}
    events: 0,
    eventsByType: {},
  };
  window.sdpDashboard = stats;

  function el(name, attrs, parent) {
    const e = document.createElementNS(SVG_NS, name);
    for (const [a, v] of Object.entries(attrs || {})) e.setAttribute(a, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  function nowMs() {
    return performance.timeOrigin + performance.now();
  }

  function fmtMs(v) {
    if (v === null || v === undefined || !isFinite(v)) return '\u2013';
    if (Math.abs(v) < 10) return v.toFixed(2);
    if (Math.abs(v) < 100) return v.toFixed(1);
    return Math.round(v).toString();
  }

  function fmtRate(v) {
    if (v === null || v === undefined || !isFinite(v)) return '\u2013';
    return v < 100 ? v.toFixed(1) : Math.round(v).toString();
  }

  // ---- the map -------------------------------------------------------------------------

  function lineToPath(line) {
    let d = '';
    for (let i = 0; i < line.length; i++) d += (i ? 'L' : 'M') + px(line[i][0]) + ',' + py(line[i][1]);
    return d;
  }

  function drawBase() {
    const w = FULL_WIDTH, h = py(MAP.south);
    for (const id of ['sea', 'map-clip-rect']) {
      const r = $(id);
      r.setAttribute('x', 0); r.setAttribute('y', 0);
      r.setAttribute('width', w); r.setAttribute('height', h);
    }
    let d = '';
    for (let lon = MAP.west; lon <= MAP.east; lon += 10) d += 'M' + px(lon) + ',0V' + h;
    for (let lat = 20; lat <= MAP.north; lat += 10) d += 'M0,' + py(lat) + 'H' + w;
    el('path', { d }, $('graticule'));
    fetch('land.json').then((r) => r.json()).then((land) => {
      el('path', { class: 'coast', d: land.coast.map(lineToPath).join('') }, $('land'));
      el('path', { class: 'border', d: land.borders.map(lineToPath).join('') }, $('land'));
    }).catch((e) => console.warn('land.json:', e));
  }

  function applyView(name) {
    const [w, e, s, n] = VIEWS[name] || VIEWS.atlantic;
    const x = px(w), y = py(n), width = px(e) - x, height = py(s) - y;
    svg.setAttribute('viewBox', `${x} ${y} ${width} ${height}`);
    k = width / FULL_WIDTH;
    svg.style.setProperty('--k', k);
    for (const b of document.querySelectorAll('#views button'))
      b.classList.toggle('active', b.dataset.view === name);
    for (const z of zones.values()) placeZoneLabel(z);
    for (const a of aircraft.values()) if (a.marker) placeMarker(a);
  }

  // ---- zones ---------------------------------------------------------------------------

  function placeZoneLabel(z) {
    z.label.setAttribute('x', px(z.row.min_lon));
    z.label.setAttribute('y', py(z.row.max_lat) - 2.5 * k);
  }

  function setZones(rows) {
    const seen = new Set();
    for (const row of rows || []) {
      seen.add(row.zone);
      let z = zones.get(row.zone);
      if (!z) {
        const g = el('g', { class: 'zone', 'data-zone': row.zone }, layers.zones);
        z = { g, rect: el('rect', {}, g), label: el('text', {}, g) };
        zones.set(row.zone, z);
      }
      z.row = row;
      z.rect.setAttribute('x', px(row.min_lon));
      z.rect.setAttribute('y', py(row.max_lat));
      z.rect.setAttribute('width', Math.max(0, px(row.max_lon) - px(row.min_lon)));
      z.rect.setAttribute('height', Math.max(0, py(row.min_lat) - py(row.max_lat)));
      placeZoneLabel(z);
      renderZone(row.zone);
    }
    for (const [name, z] of zones) {
      if (!seen.has(name)) { z.g.remove(); zones.delete(name); }
    }
    renderZoneTable();
  }

  function renderZone(name) {
    const z = zones.get(name);
    if (!z) return;
    const a = alerts.get(name);
    const count = a ? a.aircraft_count : 0;
    const crowded = !!(a && a.crowded);
    z.label.textContent = `${name} ${count} / ${z.row.capacity}`;
    z.g.classList.toggle('crowded', crowded);
    z.g.dataset.count = count;
  }

  function renderZoneTable() {
    const body = document.querySelector('#zone-table tbody');
    const rows = [...zones.values()].map((z) => {
      const a = alerts.get(z.row.zone);
      const tr = document.createElement('tr');
      tr.className = a && a.crowded ? 'crowded' : '';
      for (const v of [z.row.zone, a ? a.aircraft_count : 0, z.row.capacity]) {
        const td = document.createElement('td');
        td.textContent = v;
        tr.appendChild(td);
      }
      return tr;
    });
    body.replaceChildren(...rows);
    $('crowded-count').textContent = [...alerts.values()].filter((a) => a.crowded && zones.has(a.zone)).length;
  }

  function setAlerts(rows, replace) {
    if (replace) alerts.clear();
    for (const row of rows || []) {
      alerts.set(row.zone, row);
      renderZone(row.zone);
    }
    if (replace) for (const name of zones.keys()) renderZone(name);
    renderZoneTable();
  }

  // ---- aircraft ------------------------------------------------------------------------

  function placeMarker(a) {
    const x = px(a.row.lon), y = py(a.row.lat);
    a.marker.ring.setAttribute('cx', x);
    a.marker.ring.setAttribute('cy', y);
    a.marker.label.setAttribute('x', x + 7 * k);
    a.marker.label.setAttribute('y', y - 5 * k);
    a.marker.label.textContent = (a.row.callsign || a.row.icao24).trim() + ' ' + (a.row.squawk || '');
  }

  function upsertAircraft(row) {
    if (typeof row.lat !== 'number' || typeof row.lon !== 'number') return;
    let a = aircraft.get(row.icao24);
    if (!a) {
      const dot = el('circle', { 'data-icao24': row.icao24 }, layers.aircraft);
      a = { dot, title: el('title', {}, dot), marker: null };
      aircraft.set(row.icao24, a);
    }
    a.row = row;
    const emergency = row.squawk_alert === 'emergency';
    const phase = row.flight_phase || 'unknown';
    a.dot.setAttribute('class', `aircraft phase-${phase}` + (emergency ? ' emergency' : ''));
    a.dot.setAttribute('cx', px(row.lon));
    a.dot.setAttribute('cy', py(row.lat));
    a.title.textContent = `${(row.callsign || '').trim() || row.icao24} (${row.icao24}) ` +
      `${phase}, ${row.baro_alt ?? '?'} ft, ${row.velocity ?? '?'} kt, squawk ${row.squawk ?? '?'}` +
      (row.zone ? `, in ${row.zone}` : '');
    if (emergency && !a.marker) {
      const g = el('g', { class: 'emergency-marker emergency', 'data-icao24': row.icao24 }, layers.emergencies);
      a.marker = { g, ring: el('circle', {}, g), label: el('text', {}, g) };
    } else if (!emergency && a.marker) {
      a.marker.g.remove();
      a.marker = null;
    }
    if (a.marker) placeMarker(a);
  }

  function removeAircraft(icao24) {
    const a = aircraft.get(icao24);
    if (!a) return;
    a.dot.remove();
    if (a.marker) a.marker.g.remove();
    aircraft.delete(icao24);
  }

  function markStale() {
    const limit = nowMs() - STALE_MS;
    for (const a of aircraft.values())
      a.dot.classList.toggle('stale', typeof a.row.updated_at === 'number' && a.row.updated_at < limit);
  }

  function renderCounts() {
    $('aircraft-count').textContent = aircraft.size;
    let n = 0;
    for (const a of aircraft.values()) if (a.marker) n++;
    $('emergency-count').textContent = n;
  }

  // ---- flows ---------------------------------------------------------------------------

  function setProgress(flows) {
    const body = document.querySelector('#flows tbody');
    const seen = new Set();
    for (const f of flows || []) {
      seen.add(f.flow);
      let tr = flowRows.get(f.flow);
      if (!tr) {
        tr = document.createElement('tr');
        tr.dataset.flow = f.flow;
        for (const c of ['name', 'e2e-p50', 'e2e-p99', 'proc-p99', 'rate', 'lag']) {
          const td = document.createElement('td');
          td.className = c;
          tr.appendChild(td);
        }
        body.appendChild(tr);
        flowRows.set(f.flow, tr);
      }
      const p = f.progress || {};
      const lat = p.latencies || {};
      const cell = (c) => tr.querySelector('.' + c);
      cell('name').textContent = f.flow;
      cell('name').title = `state ${f.state}` + (p.timestamp ? `, report of ${p.timestamp}` : ', no report yet');
      cell('name').className = 'name flow-state-' + f.state;
      cell('e2e-p50').textContent = fmtMs(lat.e2eLatencyMs && lat.e2eLatencyMs.P50);
      cell('e2e-p99').textContent = fmtMs(lat.e2eLatencyMs && lat.e2eLatencyMs.P99);
      cell('proc-p99').textContent = fmtMs(lat.processingLatencyMs && lat.processingLatencyMs.P99);
      cell('rate').textContent = fmtRate(p.inputRowsPerSecond);
      cell('lag').textContent = f.lag ?? '\u2013';
    }
    for (const [name, tr] of flowRows) if (!seen.has(name)) { tr.remove(); flowRows.delete(name); }
  }

  // ---- connection state and latency ---------------------------------------------------

  function setDbState(state, error) {
    const s = $('db-state');
    if (s.dataset.state !== state) stats.dbStates.push({ state, at: Date.now() });
    s.dataset.state = state;
    s.textContent = state;
    s.title = error || '';
  }

  function setStreamState(state) {
    const s = $('stream-state');
    s.dataset.state = state;
    s.textContent = state;
  }

  // One sample per transaction in the event (rows of a transaction share updated_at).
  function recordDelays(msg, arrived) {
    const commits = [...new Set((msg.rows || []).map((r) => r.updated_at).filter((t) => typeof t === 'number'))];
    if (!commits.length) return;
    commits.sort((a, b) => a - b);
    for (const c of commits) {
      stats.commitToPage.push(arrived - c);
      if (stats.commitToPage.length > LATENCY_WINDOW) stats.commitToPage.shift();
    }
    const newest = commits[commits.length - 1];
    stats.lastCommitToPageMs = arrived - newest;
    const sorted = [...stats.commitToPage].sort((a, b) => a - b);
    stats.p50 = sorted[Math.floor((sorted.length - 1) / 2)];
    const out = $('commit-to-page-ms');
    out.textContent = fmtMs(stats.lastCommitToPageMs);
    out.dataset.ms = stats.lastCommitToPageMs.toFixed(3);
    out.dataset.p50 = stats.p50.toFixed(3);
    out.dataset.samples = sorted.length;
    $('commit-to-page-p50').textContent = fmtMs(stats.p50);
    const parts = [];
    if (msg.notified_at) parts.push(`notify ${fmtMs(msg.notified_at - newest)}`);
    if (msg.notified_at && msg.sent_at) parts.push(`read+send ${fmtMs(msg.sent_at - msg.notified_at)}`);
    if (msg.sent_at) parts.push(`to page ${fmtMs(arrived - msg.sent_at)}`);
    $('delay-breakdown').textContent = parts.join(' \u00b7 ');
  }

  function countEvent(type) {
    stats.events++;
    stats.eventsByType[type] = (stats.eventsByType[type] || 0) + 1;
    $('event-count').textContent = stats.events;
    $('last-event').textContent = `(${type} at ${new Date().toLocaleTimeString()})`;
  }

  // ---- the event stream ----------------------------------------------------------------

  const handlers = {
    snapshot(msg) {
      setDbState(msg.db, msg.error);
      setZones(msg.zones);
      const keep = new Set((msg.positions || []).map((r) => r.icao24));
      for (const icao24 of [...aircraft.keys()]) if (!keep.has(icao24)) removeAircraft(icao24);
      for (const row of msg.positions || []) upsertAircraft(row);
      setAlerts(msg.zone_alerts, true);
      setProgress(msg.progress);
      markStale();
      renderCounts();
    },
    positions(msg) {
      for (const row of msg.rows || []) upsertAircraft(row);
      renderCounts();
      recordDelays(msg, nowMs());
    },
    zone_alerts(msg) {
      setAlerts(msg.rows, false);
      recordDelays(msg, nowMs());
    },
    zones(msg) { setZones(msg.zones); },
    progress(msg) { setProgress(msg.flows); },
    status(msg) { setDbState(msg.db, msg.error); },
  };

  function connect() {
    const es = new EventSource('events');
    es.onopen = () => setStreamState('open');
    es.onerror = () => {
      // EventSource reconnects by itself (the server asks for 1 s); until then we know nothing
      setStreamState(es.readyState === EventSource.CLOSED ? 'closed' : 'connecting');
      setDbState('unknown', 'no connection to the dashboard');
    };
    for (const [type, handle] of Object.entries(handlers)) {
      es.addEventListener(type, (e) => {
        let msg;
        try { msg = JSON.parse(e.data); } catch (err) { console.warn(type, err); return; }
        handle(msg);
        countEvent(type);
      });
    }
  }

  for (const b of document.querySelectorAll('#views button'))
    b.addEventListener('click', () => applyView(b.dataset.view));
  drawBase();
  applyView('atlantic');
  connect();
  setInterval(markStale, 5000);
})();
