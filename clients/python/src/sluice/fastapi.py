"""FastAPI: the Starlette adapters (:mod:`sluice.starlette`), which FastAPI
runs as they are. A route is limited by the decorator or by the
dependency::

    from fastapi import Depends, FastAPI
    from sluice.fastapi import Limiter, RateLimited, SluiceMiddleware, problem_response

    limiter = Limiter(sluice.AsyncClient(failure="closed"))
    app = FastAPI()
    app.add_exception_handler(RateLimited, problem_response)  # problem+json refusals (optional)

    @app.get("/search")
    @limiter.limit("10/minute")
    async def search(q: str): ...

    @app.get("/export")
    async def export(d=Depends(limiter.depends("5/hour"))): ...
"""

from .starlette import Limiter, RateLimited, SluiceMiddleware, problem_response, remote_address

__all__ = ["Limiter", "RateLimited", "SluiceMiddleware", "problem_response", "remote_address"]
