/**
 * The SIPp UAC scenario the call benchmarks place their calls with (bench/bridge, bench/soak):
 * INVITE with a PCMU + telephone-event offer to [service] (the caller from field0 of SIPp's CSV),
 * optional 100/180/183, 200, ACK, what the bench does during the call, BYE, its 200. Written
 * into SIPp's working directory at run time (bench/run takes every bench/*.ts for a benchmark, so
 * the XML lives in a module). What differs per bench is passed in: the audio m-line (SIPp's own
 * RTP socket or a port of the bench's), what to do with the 200's SDP answer, and the middle of
 * the call.
 */
export interface UacScenarioOptions {
  /** The scenario's name attribute. */
  name: string;
  /** The SDP o= session id (tells the benches' calls apart in a capture). */
  sdpSessionId: number;
  /** The offer's m= line, e.g. `m=audio [rtpstream_audio_port] RTP/AVP 0 101`. */
  mediaLine: string;
  /** XML inside <recv response="200"> (an <action>), or '' for none. */
  onAnswer?: string;
  /** XML between the ACK and the BYE (actions and the pause that holds the call). */
  duringCall: string;
}

/** A header block of an in-dialog request SIPp sends after the 200 (ACK, BYE). */
function inDialog(method: 'ACK' | 'BYE'): string {
  return `    <![CDATA[

      ${method} [next_url] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];rport;branch=[branch]
      [routes]
      From: <sip:[field0]@[local_ip]:[local_port]>;tag=[pid]SIPpTag[call_number]
      To: <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: [cseq] ${method}
      Max-Forwards: 70
      Content-Length: 0

    ]]>`;
}

export function uacScenario(o: UacScenarioOptions): string {
  const ok = o.onAnswer ? `  <recv response="200" rrs="true">\n${o.onAnswer}\n  </recv>` : '  <recv response="200" rrs="true"/>';
  return `<?xml version="1.0" encoding="ISO-8859-1" ?>
<!DOCTYPE scenario SYSTEM "sipp.dtd">
<scenario name="${o.name}">
  <send retrans="500">
    <![CDATA[

      INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];rport;branch=[branch]
      From: <sip:[field0]@[local_ip]:[local_port]>;tag=[pid]SIPpTag[call_number]
      To: <sip:[service]@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: [cseq] INVITE
      Contact: <sip:[field0]@[local_ip]:[local_port];transport=[transport]>
      Max-Forwards: 70
      Content-Type: application/sdp
      Content-Length: [len]

      v=0
      o=- ${o.sdpSessionId} 1 IN IP4 [local_ip]
      s=-
      c=IN IP4 127.0.0.1
      t=0 0
      ${o.mediaLine}
      a=rtpmap:0 PCMU/8000
      a=rtpmap:101 telephone-event/8000
      a=ptime:20
      a=sendrecv

    ]]>
  </send>
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="183" optional="true"/>
${ok}
  <send>
${inDialog('ACK')}
  </send>
${o.duringCall}
  <send retrans="500">
${inDialog('BYE')}
  </send>
  <recv response="200" crlf="true"/>
</scenario>
`;
}
