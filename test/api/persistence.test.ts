/** Restart the daemon on the same data directory: every resource is intact, keys still work. */
import { describe, expect, it } from 'vitest';
import { startTestDaemon } from '../helpers/daemon.ts';
import { startFakeCarrier } from '../helpers/fake-carrier.ts';

describe('restart on the same data directory', () => {
  it('finds every resource intact and decrypts stored secrets', async () => {
    const carrier = await startFakeCarrier();
    let d = await startTestDaemon({ telco: { api_base_url: carrier.url } });
    try {
      const other = await d.newOrgKey('second');
      carrier.addNumber('AC7', 'tok7', '+15550007777');
      const number = (await d.api('POST', '/v1/telco/numbers', { phone_number: '+15550007777', account_sid: 'AC7', auth_token: 'tok7', label: 'Main' })).body;
      const agent = (await d.api('POST', '/v1/agents', { name: 'Persistent', phone_number_id: number.id, keyterms: ['a', 'b'] })).body;
      const patched = (await d.api('PATCH', `/v1/agents/${agent.id}`, { vad_settings: { stop_secs: 1.25 } })).body;
      await d.api('PUT', `/v1/agents/${agent.id}/draft`, { nodes: [{ id: 'n1', type: 'tool', name: 't', description: 'd', parameters: {} }] });
      const v = (await d.api('POST', `/v1/agents/${agent.id}/versions`, { tag: 'v1' })).body;
      const published = (await d.api('POST', `/v1/agents/${agent.id}/versions/${v.id}/publish`)).body;
      const trunk = (
        await d.api('POST', '/v1/sip-trunks', {
          pbx: 'generic',
          name: 'Office',
          inbound_auth_type: 'digest',
          inbound_sip_username: 'office-user',
          inbound_sip_password: 'pw-123',
          outbound_host: 'pbx.example.com:5061;transport=tls',
          outbound_sip_username: 'out',
          outbound_sip_password: 'pw-456',
        })
      ).body;
      const assignment = (await d.api('POST', `/v1/sip-trunks/${trunk.id}/assignments`, { agent_id: agent.id, number: '100' })).body;
      const otherAgent = (await d.api('POST', '/v1/agents', { name: 'Theirs' }, { key: other })).body;

      const snapshot = async () => ({
        agent: (await d.api('GET', `/v1/agents/${agent.id}`)).body,
        agents: (await d.api('GET', '/v1/agents')).body,
        draft: (await d.api('GET', `/v1/agents/${agent.id}/draft`)).body,
        versions: (await d.api('GET', `/v1/agents/${agent.id}/versions`)).body,
        numbers: (await d.api('GET', '/v1/telco/numbers')).body,
        trunk: (await d.api('GET', `/v1/sip-trunks/${trunk.id}`)).body,
        assignments: (await d.api('GET', `/v1/sip-trunks/${trunk.id}/assignments`)).body,
        theirs: (await d.api('GET', `/v1/agents/${otherAgent.id}`, undefined, { key: other })).body,
        org: (await d.api('GET', '/v1/organization')).body,
      });
      const before = await snapshot();
      // Publishing later moved updated_at (the active version changed); the settings are the PATCH's.
      expect({ ...before.agent, updated_at: patched.updated_at }).toEqual(patched);
      expect(before.versions).toEqual([published]);
      expect(before.assignments).toEqual([assignment]);

      d = await d.restart();
      const after = await snapshot();
      expect(after).toEqual(before);
      // Encrypted secrets still open with the key kept in the data directory.
      const orgId = (await d.daemon.store.organizations.byApiKey(d.key))!.id;
      expect((await d.daemon.store.agents.get(orgId, agent.id))!.active_version_id).toBe(v.id);
      const sealed = d.daemon.store.sqlite!.prepare('SELECT auth_token_enc FROM telco_numbers WHERE id = ?').get(number.id) as { auth_token_enc: string };
      expect(d.daemon.store.secretBox.open(sealed.auth_token_enc)).toBe('tok7');
      const pw = d.daemon.store.sqlite!.prepare('SELECT inbound_sip_password_enc FROM sip_trunks WHERE id = ?').get(trunk.id) as { inbound_sip_password_enc: string };
      expect(d.daemon.store.secretBox.open(pw.inbound_sip_password_enc)).toBe('pw-123');
    } finally {
      await d.close();
      await carrier.close();
    }
  });
});
