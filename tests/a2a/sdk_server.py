"""A remote A2A agent built with the official SDK (a2a-sdk, PyPI), for tests/a2a.rs.

python sdk_server.py PORT TOKEN LOG: serves agent `remote` at http://127.0.0.1:PORT/remote
(JSON-RPC, bearer TOKEN required except for the card) with three skills:
- quick: answers "echo: TEXT" at once;
- colour: asks "Which colour?" first (INPUT_REQUIRED), then answers "painted COLOUR";
- slow: works for SLOW seconds (env, default 4), then answers "slow result for TEXT";
- Refund: answers "refunded TEXT" (a skill id in capitals, for approval patterns);
- callback: calls back the agent of CALLBACK_FILE (env; the file holds "URL TOKEN", written by
  the test once the agent is served) with a new message "callback N from remote" of its own —
  without the depth metadata, as most agent systems do — while its task works, then answers
  "called back"; at most CALLBACK_CAP (env, default 30) times in all, its own loop bound.
Every message it receives is appended to LOG as one line: MESSAGE_ID DEPTH TEXT (DEPTH: the
agentfleet.dev/depth of its metadata, -1 without).
"""
import asyncio
import os
import sys

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import JSONResponse
from starlette.routing import Mount

from a2a.client import ClientConfig, create_client
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (AgentCapabilities, AgentCard, AgentInterface, AgentSkill,
                       HTTPAuthSecurityScheme, Message, Part, Role, SecurityRequirement,
                       SecurityScheme, SendMessageConfiguration, SendMessageRequest, StringList,
                       Task, TaskState, TaskStatus)

PORT, TOKEN, LOG = int(sys.argv[1]), sys.argv[2], sys.argv[3]
SLOW = float(os.environ.get('SLOW', '4'))
CALLBACK_FILE = os.environ.get('CALLBACK_FILE', '')
CALLBACK_CAP = int(os.environ.get('CALLBACK_CAP', '30'))
callbacks = 0


async def call_back():
    """A new message to the agent that called, as a caller of its own (no depth metadata)."""
    global callbacks
    if not CALLBACK_FILE or callbacks >= CALLBACK_CAP:
        return
    callbacks += 1
    with open(CALLBACK_FILE) as f:
        url, token = f.read().split()
    http = httpx.AsyncClient(headers={'Authorization': f'Bearer {token}'}, timeout=10)
    client = await create_client(url, client_config=ClientConfig(streaming=False, httpx_client=http))
    request = SendMessageRequest(message=Message(
        message_id=f'callback-{callbacks}', role=Role.ROLE_USER,
        parts=[Part(text=f'callback {callbacks} from remote')]))
    request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    async for _ in client.send_message(request):
        break
    await client.close()


class Remote(AgentExecutor):
    async def execute(self, context: RequestContext, q: EventQueue):
        text = context.get_user_input()
        meta = context.message.metadata
        depth = int(meta['agentfleet.dev/depth']) if 'agentfleet.dev/depth' in meta else -1
        with open(LOG, 'a') as log:
            log.write(f'{context.message.message_id} {depth} {text}\n')
        if context.current_task is None:
            await q.enqueue_event(Task(id=context.task_id, context_id=context.context_id,
                                       status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED),
                                       history=[context.message]))
        up = TaskUpdater(q, context.task_id, context.context_id)
        skill = context.message.metadata['skill'] if 'skill' in context.message.metadata else ''
        if skill == 'colour' and context.current_task is None:
            await up.requires_input(up.new_agent_message(parts=[Part(text='Which colour?')]))
            return
        if skill == 'colour':
            await up.add_artifact([Part(text=f'painted {text}')], name='answer', last_chunk=True)
        elif skill == 'Refund':
            await up.add_artifact([Part(text=f'refunded {text}')], name='answer', last_chunk=True)
        elif skill == 'callback':
            await up.start_work()
            await call_back()
            await up.add_artifact([Part(text='called back')], name='answer', last_chunk=True)
        elif skill == 'slow':
            await up.start_work()
            await asyncio.sleep(SLOW)
            await up.add_artifact([Part(text=f'slow result for {text}')], name='answer', last_chunk=True)
        else:
            await up.add_artifact([Part(text=f'echo: {text}')], name='answer', last_chunk=True)
        await up.complete()

    async def cancel(self, context, q):
        await TaskUpdater(q, context.task_id, context.context_id).cancel()


def card(base):
    skill = lambda i, d: AgentSkill(id=i, name=i, description=d, tags=['test'])
    return AgentCard(
        name='remote', description='A remote agent built with the A2A SDK', version='1.0.0',
        supported_interfaces=[AgentInterface(url=f'{base}/', protocol_binding='JSONRPC',
                                             protocol_version='1.0')],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        security_schemes={'bearer': SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(scheme='Bearer'))},
        security_requirements=[SecurityRequirement(schemes={'bearer': StringList()})],
        default_input_modes=['text/plain'], default_output_modes=['text/plain'],
        skills=[skill('quick', 'Answers at once'), skill('colour', 'Paints, asking the colour'),
                skill('slow', 'Takes a while'), skill('Refund', 'Refunds an order'),
                skill('callback', 'Calls the caller back')])


class Bearer(BaseHTTPMiddleware):
    async def dispatch(self, request, call_next):
        if not request.url.path.endswith('/.well-known/agent-card.json') and \
                request.headers.get('authorization') != f'Bearer {TOKEN}':
            return JSONResponse({'error': 'unauthorized'}, status_code=401)
        return await call_next(request)


base = f'http://127.0.0.1:{PORT}/remote'
c = card(base)
handler = DefaultRequestHandler(agent_executor=Remote(), task_store=InMemoryTaskStore(), agent_card=c)
inner = Starlette(routes=[*create_agent_card_routes(agent_card=c),
                          *create_jsonrpc_routes(request_handler=handler, rpc_url='/')])
app = Starlette(routes=[Mount('/remote', app=inner)])
app.add_middleware(Bearer)
uvicorn.run(app, host='127.0.0.1', port=PORT, log_level='warning')
