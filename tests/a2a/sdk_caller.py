"""An outside caller of one agent, with the official A2A SDK (a2a-sdk, PyPI), for tests/parties.rs.

python sdk_caller.py URL TOKEN: reads the agent's card at URL, then takes one JSON command a
line on stdin and answers each with one JSON line on stdout:
- {"op": "send", "text": T, "contextId"?: C, "taskId"?: T, "metadata"?: {...}, "immediately"?: bool}
  -> {"task": TASK} (as the protocol's JSON) or {"error": "TYPE: what"};
- {"op": "get", "id": TASK_ID} -> {"task": TASK} or {"error": ...}.
"""
import asyncio
import json
import sys
import uuid

import httpx
from google.protobuf.json_format import MessageToDict

from a2a.client import ClientConfig, create_client
from a2a.types import (GetTaskRequest, Message, Part, Role, SendMessageConfiguration,
                       SendMessageRequest)


async def run(client, cmd):
    if cmd['op'] == 'get':
        return {'task': MessageToDict(await client.get_task(GetTaskRequest(id=cmd['id'])))}
    message = Message(message_id=cmd.get('messageId') or str(uuid.uuid4()), role=Role.ROLE_USER,
                      parts=[Part(text=cmd['text'])], context_id=cmd.get('contextId', ''),
                      task_id=cmd.get('taskId', ''))
    if 'metadata' in cmd:
        message.metadata.update(cmd['metadata'])
    request = SendMessageRequest(message=message)
    if cmd.get('immediately'):
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    async for event in client.send_message(request):
        return {'task': MessageToDict(event.task)}
    return {'error': 'no answer'}


async def main(url, token):
    http = httpx.AsyncClient(headers={'Authorization': f'Bearer {token}'}, timeout=60)
    client = await create_client(url, client_config=ClientConfig(streaming=False, httpx_client=http))
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        try:
            out = await run(client, json.loads(line))
        except Exception as e:  # every refusal is an answer the test reads
            out = {'error': f'{type(e).__name__}: {e}'}
        print(json.dumps(out), flush=True)
    await client.close()


asyncio.run(main(sys.argv[1], sys.argv[2]))
