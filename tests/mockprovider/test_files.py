"""The mock's Files API (``/v1/files``, mockprovider.files), driven by the real openai client:
upload, retrieve, content, list, delete, the multipart parser and the 400s/404s.

Every test runs in virtual time (``conftest.py``, ``served.serve``).
"""

from __future__ import annotations

import openai
import pytest
from served import CLIENT_GENERATORS, serve

from mockprovider import MockConfig
from mockprovider.files import parse_form
from mockprovider.wire import BadRequest

pytestmark = [pytest.mark.anyio, CLIENT_GENERATORS]

DATA = b'{"a": 1}\r\n{"b": "\xc3\xa9\\n"}\n\x00\xff binary --boundary-like\r\n'


async def test_an_upload_is_kept_byte_for_byte_and_can_be_read_listed_and_deleted() -> None:
    async with serve(MockConfig()) as mock:
        uploaded = await mock.client.files.create(file=("in.jsonl", DATA), purpose="batch")
        other = await mock.client.files.create(file=("notes.txt", b"x"), purpose="user_data")
        retrieved = await mock.client.files.retrieve(uploaded.id)
        content = await mock.client.files.content(uploaded.id)
        listed = await mock.client.files.list()
        batch_only = await mock.client.files.list(purpose="batch")
        deleted = await mock.client.files.delete(uploaded.id)
        with pytest.raises(openai.NotFoundError) as missing:
            await mock.client.files.retrieve(uploaded.id)
        with pytest.raises(openai.NotFoundError):
            await mock.client.files.content(uploaded.id)
        after_delete = await mock.client.files.list()
    assert uploaded.id.startswith("file-") and uploaded.object == "file"
    assert (uploaded.bytes, uploaded.filename, uploaded.purpose) == (len(DATA), "in.jsonl", "batch")
    assert uploaded.status == "processed" and uploaded.created_at > 1_600_000_000
    assert retrieved == uploaded
    assert content.content == DATA
    assert [f.id for f in listed.data] == [other.id, uploaded.id]  # newest first
    assert [f.id for f in batch_only.data] == [uploaded.id]
    assert (deleted.id, deleted.object, deleted.deleted) == (uploaded.id, "file", True)
    assert missing.value.body == {
        "message": f"No such File object: {uploaded.id}",
        "type": "invalid_request_error",
        "param": "id",
        "code": None,
    }
    assert [f.id for f in after_delete.data] == [other.id]


async def test_a_bad_upload_gets_a_400_naming_the_parameter() -> None:
    async with serve(MockConfig()) as mock:
        with pytest.raises(openai.BadRequestError) as purpose:
            await mock.client.files.create(file=("a.jsonl", b"{}"), purpose="nonsense")  # type: ignore[arg-type]
        no_file = await mock.http.post(
            "/v1/files", data={"purpose": "batch"}, files={"other": ("x", b"1")}
        )
        not_multipart = await mock.http.post("/v1/files", json={"purpose": "batch"})
        bad_limit = await mock.http.get("/v1/files", params={"limit": "0"})
    assert purpose.value.status_code == 400
    assert purpose.value.body["param"] == "purpose"  # type: ignore[index]
    assert no_file.status_code == 400
    assert no_file.json()["error"]["param"] == "file"
    assert not_multipart.status_code == 400
    assert "multipart/form-data" in not_multipart.json()["error"]["message"]
    assert bad_limit.status_code == 400


async def test_the_files_api_needs_the_key_when_one_is_set() -> None:
    async with serve(MockConfig(api_key="k")) as mock:
        refused = await mock.http.get("/v1/files")
        uploaded = await mock.client.files.create(file=("a.jsonl", b"{}"), purpose="batch")
        stats = await mock.stats()
    assert refused.status_code == 401
    assert uploaded.bytes == 2
    assert stats.counters.unauthorized == 1
    assert stats.counters.requests == 0  # the Files API is not a served API


def test_the_multipart_parser_keeps_exact_bytes_and_refuses_what_is_not_a_form() -> None:
    body = (
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="purpose"\r\n\r\n'
        b"batch\r\n"
        b"--XyZ\r\n"
        b'Content-Disposition: form-data; name="file"; filename="b.jsonl"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + DATA + b"\r\n--XyZ--\r\n"
    )
    form = parse_form("multipart/form-data; boundary=XyZ", body)
    assert form == {"purpose": (None, b"batch"), "file": ("b.jsonl", DATA)}
    for content_type, raw in [
        ("application/json", b"{}"),
        ("multipart/form-data", body),  # no boundary
        ("multipart/form-data; boundary=XyZ", b"--XyZ\r\nno blank line--XyZ--"),
        ("multipart/form-data; boundary=XyZ", b"--XyZ\r\nX-Other: 1\r\n\r\nx\r\n--XyZ--"),
    ]:
        with pytest.raises(BadRequest):
            parse_form(content_type, raw)
