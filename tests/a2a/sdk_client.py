"""The official A2A SDK (a2a-sdk, PyPI) against agents served by `agentfleet dev`.

Run by tests/a2a.rs: python sdk_client.py BASE HUSAM_TOKEN DANA_TOKEN. BASE is the gateway's
URL; agent `helper` answers (scripted model), agent `sleeper` is paused (its tasks wait).
Every check asserts; the first failure exits non-zero with what was wrong.
"""
import asyncio
import sys
import uuid

import httpx
from google.api import field_behavior_pb2
from google.protobuf.json_format import ParseDict

from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import (AgentCard, CancelTaskRequest, GetTaskRequest, ListTasksRequest, Message,
                       Part, Role, SendMessageConfiguration, SendMessageRequest,
                       SubscribeToTaskRequest, TaskState)

BASE, HUSAM, DANA = sys.argv[1], sys.argv[2], sys.argv[3]
HELPER, SLEEPER = f'{BASE}/a2a/default/helper', f'{BASE}/a2a/default/sleeper'


def msg(text, context_id='', task_id='', immediately=False):
    req = SendMessageRequest(message=Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)],
        context_id=context_id, task_id=task_id))
    if immediately:
        req.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    return req


def state(t):
    return TaskState.Name(t.status.state)


def missing_required(message, path=''):
    """Fields the proto marks REQUIRED (google.api.field_behavior) that are unset or empty."""
    missing = []
    for field in message.DESCRIPTOR.fields:
        name = f'{path}{field.json_name}'
        opts = field.GetOptions().Extensions[field_behavior_pb2.field_behavior]
        value = getattr(message, field.name)
        repeated = field.is_repeated
        if field_behavior_pb2.REQUIRED in opts:
            empty = (len(value) == 0) if repeated else (
                not message.HasField(field.name) if field.message_type else value in ('', 0))
            if empty:
                missing.append(name)
        if field.message_type and not field.message_type.GetOptions().map_entry:
            items = value if repeated else ([value] if message.HasField(field.name) else [])
            for i, item in enumerate(items):
                missing += missing_required(item, f'{name}[{i}].' if repeated else f'{name}.')
    return missing


async def one(client, req):
    async for ev in client.send_message(req):
        return ev


async def main():
    auth = {'Authorization': f'Bearer {HUSAM}'}

    # The card: public, strict against the spec's proto (no unknown field, every REQUIRED set).
    async with httpx.AsyncClient() as h:
        raw = (await h.get(f'{HELPER}/.well-known/agent-card.json')).json()
        card = ParseDict(raw, AgentCard())
        assert not missing_required(card), missing_required(card)
        resolved = await A2ACardResolver(h, HELPER).get_agent_card()
        assert resolved.name == 'helper', resolved
        assert [i.protocol_binding for i in resolved.supported_interfaces] == ['JSONRPC', 'HTTP+JSON']
        assert 'bearer' in resolved.security_schemes
        assert 'secret' not in str(raw).lower(), raw
        print('card ok')

    def config(**kw):
        return ClientConfig(httpx_client=httpx.AsyncClient(headers=auth, timeout=30), **kw)

    jsonrpc = await create_client(HELPER, client_config=config(streaming=False))
    streaming = await create_client(HELPER, client_config=config(streaming=True))
    rest = await create_client(HELPER, client_config=config(
        streaming=False, supported_protocol_bindings=['HTTP+JSON'], use_client_preference=True))
    sleeper = await create_client(SLEEPER, client_config=config(streaming=False))
    sleeper_stream = await create_client(SLEEPER, client_config=config(streaming=True))

    # SendMessage (JSON-RPC, blocking): the task completes with what the agent said.
    t = (await one(jsonrpc, msg('hello there'))).task
    assert state(t) == 'TASK_STATE_COMPLETED', t
    assert 'hello there' in t.artifacts[0].parts[0].text, t
    assert t.status.message.role == Role.ROLE_AGENT, t
    # The same conversation again (contextId), then GetTask and ListTasks.
    t2 = (await one(jsonrpc, msg('second', context_id=t.context_id))).task
    assert t2.context_id == t.context_id and t2.id != t.id and state(t2) == 'TASK_STATE_COMPLETED'
    g = await jsonrpc.get_task(GetTaskRequest(id=t.id))
    assert g.id == t.id and state(g) == 'TASK_STATE_COMPLETED', g
    listed = await jsonrpc.list_tasks(ListTasksRequest(context_id=t.context_id))
    assert [x.id for x in listed.tasks] == [t2.id, t.id], listed
    page = await jsonrpc.list_tasks(ListTasksRequest(page_size=1))
    assert len(page.tasks) == 1 and page.next_page_token and page.total_size >= 2, page
    print('send, get, list ok')

    # SendStreamingMessage: the task, then the agent's message, then COMPLETED.
    kinds = []
    async for ev in streaming.send_message(msg('stream me')):
        kind = ev.WhichOneof('payload')
        kinds.append(kind if kind != 'status_update'
                     else 'status:' + TaskState.Name(ev.status_update.status.state))
    assert kinds[0] == 'task' and 'artifact_update' in kinds, kinds
    assert kinds[-1] == 'status:TASK_STATE_COMPLETED', kinds
    print('stream ok', kinds)

    # The HTTP+JSON binding.
    t = (await one(rest, msg('over rest'))).task
    assert state(t) == 'TASK_STATE_COMPLETED' and 'over rest' in t.artifacts[0].parts[0].text, t
    print('rest ok')

    # A task that asks (an interactive tool): INPUT_REQUIRED, answered on the task itself;
    # an answer the tool's schema refuses is refused, and the task still waits.
    t = (await one(jsonrpc, msg('deploy web 1.2'))).task
    assert state(t) == 'TASK_STATE_INPUT_REQUIRED', t
    assert 'confirm_deployment' in t.status.message.parts[0].text, t
    bad = msg('', task_id=t.id, context_id=t.context_id)
    bad.message.parts[0].Clear()
    bad.message.parts[0].data.struct_value.update({'confirmed': 'yes'})
    try:
        await one(jsonrpc, bad)
        raise AssertionError('an answer the schema refuses was taken')
    except Exception as e:
        assert 'schema' in str(e), repr(e)
    good = msg('', task_id=t.id)
    good.message.parts[0].Clear()
    good.message.parts[0].data.struct_value.update({'confirmed': True})
    done = (await one(jsonrpc, good)).task
    assert done.id == t.id and state(done) == 'TASK_STATE_COMPLETED', done
    assert any('deploy' in a.parts[0].text for a in done.artifacts), done
    print('input required ok')

    # An approval (the HTTP tool restart needs one, which Dana gives): never the caller's own.
    # The task works on, saying who decides; Husam's answer on it is refused; Dana, who is
    # not in the conversation, finds the call among hers and denies it with a reason; the
    # tool does not run, and the agent says so.
    guard = await create_client(f'{BASE}/a2a/default/guard', client_config=config(streaming=False))
    t = (await one(guard, msg('please restart', immediately=True))).task
    for _ in range(100):
        t = await guard.get_task(GetTaskRequest(id=t.id))
        if t.status.message.parts and 'human:dana' in t.status.message.parts[0].text:
            break
        await asyncio.sleep(0.1)
    assert state(t) == 'TASK_STATE_WORKING', t
    assert 'approval' in t.status.message.parts[0].text, t
    try:
        await one(guard, msg('approve', task_id=t.id))
        raise AssertionError('the caller approved its own call')
    except Exception as e:
        assert '403' in str(e) or 'PermissionDenied' in type(e).__name__, repr(e)
    dana = {'Authorization': f'Bearer {DANA}'}
    async with httpx.AsyncClient(timeout=10) as h:
        calls = (await h.get(f'{BASE}/v1/calls', headers=dana)).json()['calls']
        call = next(c for c in calls if c['tool'] == 'restart')
        assert call['mayAnswer'] and call['approvers'] == ['human:dana'], call
        r = await h.post(f"{BASE}/v1/spaces/{call['namespace']}/{call['space']}/tool-calls/{call['callId']}",
                         json={'decision': 'deny', 'reason': 'not during the freeze'}, headers=dana)
        assert r.status_code == 202, r.text
    for _ in range(100):
        done = await guard.get_task(GetTaskRequest(id=t.id))
        if state(done) == 'TASK_STATE_COMPLETED':
            break
        await asyncio.sleep(0.1)
    assert state(done) == 'TASK_STATE_COMPLETED', done
    said = ' '.join(a.parts[0].text for a in done.artifacts)
    assert 'denied' in said and 'not during the freeze' in said, said
    await guard.close()
    print('approval ok')

    # A spent budget: the first message is answered (and spends it), the next is rejected
    # at once, saying why.
    frugal = await create_client(f'{BASE}/a2a/default/frugal', client_config=config(streaming=False))
    first = (await one(frugal, msg('hello'))).task
    assert state(first) == 'TASK_STATE_COMPLETED', first
    t = (await one(frugal, msg('and again'))).task
    assert state(t) == 'TASK_STATE_REJECTED', t
    assert 'budget' in t.status.message.parts[0].text, t
    await frugal.close()
    print('budget ok')

    # A task that waits (a paused agent): returned at once, subscribed to, canceled.
    t = (await one(sleeper, msg('wait for me', immediately=True))).task
    assert state(t) == 'TASK_STATE_SUBMITTED', t
    events = []

    async def follow():
        async for ev in sleeper_stream.subscribe(SubscribeToTaskRequest(id=t.id)):
            events.append(ev)

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    c = await sleeper.cancel_task(CancelTaskRequest(id=t.id))
    assert state(c) == 'TASK_STATE_CANCELED', c
    await asyncio.wait_for(follower, 10)
    assert events[0].WhichOneof('payload') == 'task', events
    assert TaskState.Name(events[-1].status_update.status.state) == 'TASK_STATE_CANCELED', events
    try:
        await sleeper.cancel_task(CancelTaskRequest(id=t.id))
        raise AssertionError('a canceled task was canceled again')
    except Exception as e:
        assert 'TaskNotCancelable' in type(e).__name__, repr(e)
    try:
        await sleeper.get_task(GetTaskRequest(id='nope'))
        raise AssertionError('an unknown task was found')
    except Exception as e:
        assert 'TaskNotFound' in type(e).__name__, repr(e)
    print('subscribe, cancel ok')

    for c in (jsonrpc, streaming, rest, sleeper, sleeper_stream):
        await c.close()

    # Refusals on the wire: no token, a token the agent does not admit, no version.
    body = {'jsonrpc': '2.0', 'id': 7, 'method': 'SendMessage', 'params': {
        'message': {'messageId': 'm-x', 'role': 'ROLE_USER', 'parts': [{'text': 'x'}]}}}
    v1 = {'A2A-Version': '1.0'}
    async with httpx.AsyncClient(timeout=10) as h:
        r = await h.post(HELPER, json=body, headers=v1)
        assert r.status_code == 401 and r.headers['www-authenticate'] == 'Bearer', r.text
        r = await h.post(HELPER, json=body, headers={**v1, 'Authorization': f'Bearer {DANA}'})
        assert r.status_code == 403 and r.json()['id'] == 7, r.text
        r = await h.post(HELPER, json=body, headers=auth)
        assert r.status_code == 200 and r.json()['error']['code'] == -32009, r.text
        r = await h.post(f'{HELPER}/message:send', json={'message': body['params']['message']},
                         headers=auth)
        err = r.json()['error']
        assert r.status_code == 400 and err['details'][0]['reason'] == 'VERSION_NOT_SUPPORTED', r.text
        r = await h.get(f'{HELPER}/tasks/nope', headers={**auth, **v1})
        assert r.status_code == 404 and r.json()['error']['status'] == 'NOT_FOUND', r.text
    print('refusals ok')


asyncio.run(main())
