"""kmrun_client: the client of kmrun's judge as a service (kmrun serve --listen).

    from kmrun_client import Client, AsyncClient
    c = Client("http://host:8470", token_file="~/.kmrun-token")
    c.evaluate([{"task": "l1_relu", "completion": text}])        # verdicts, in order
    for v in c.stream(requests): ...                               # as they finish
    c.tasks(); c.health(); c.metrics()

Verdicts are the server's JSON objects: status, cause ("candidate" | "infra"), reward (None
when the cause is infra: mask it), reward_components, feedback, and the judge's evidence.
"""
from .client import Client, Endpoint, KmrunError, load_endpoints
from .aio import AsyncClient

__all__ = ["Client", "AsyncClient", "Endpoint", "KmrunError", "load_endpoints"]
__version__ = "0.1.0"
