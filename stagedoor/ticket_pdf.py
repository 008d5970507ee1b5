"""An order's tickets as one PDF: one page per seat, each with a Code 128 barcode.

Pure and synchronous (reportlab), so render_tickets runs it in a thread. The
barcode encodes the order and the seat (``SD-<order>-<label>``); a seat label
must be a seat number and a row letter (``14C``), and anything else raises
:class:`SeatLabelInvalid` before a page is drawn. The PDF is built with
reportlab's ``invariant`` flag: the same order gives the same bytes.
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from reportlab.graphics.barcode import code128
from reportlab.lib.pagesizes import A6, landscape
from reportlab.lib.units import mm
from reportlab.pdfgen import canvas

from stagedoor.errors import RenderStopped, SeatLabelInvalid

SEAT_LABEL = re.compile(r"[0-9]{1,3}[A-Z]")


@dataclass(frozen=True)
class TicketOrder:
    """What a ticket page shows about its order."""

    order_id: int
    buyer_email: str
    event: str
    starts_at: datetime


def barcode_value(order_id: int, label: str) -> str:
    """The text a seat's barcode encodes; refuses a label that is not like ``14C``."""
    if not SEAT_LABEL.fullmatch(label):
        raise SeatLabelInvalid(f"{label!r} is not a row letter and a seat number")
    return f"SD-{order_id}-{label}"


def render_pdf(order: TicketOrder, labels: Sequence[str], stop: threading.Event | None = None) -> bytes:
    """The order's tickets, one page per seat label, in the order given; ``stop`` (the job's ``job.stopping``)
    set ends the render before the next page with :class:`RenderStopped`: the render runs in a thread,
    which nothing else can stop."""
    values = [barcode_value(order.order_id, label) for label in labels]
    out = io.BytesIO()
    size = landscape(A6)
    pdf = canvas.Canvas(out, pagesize=size, invariant=True)
    pdf.setTitle(f"Stagedoor order {order.order_id}")
    height = size[1]
    for label, value in zip(labels, values, strict=True):
        if stop is not None and stop.is_set():
            raise RenderStopped(f"the render of order {order.order_id} was told to stop before seat {label}")
        pdf.setFont("Helvetica-Bold", 14)
        pdf.drawString(10 * mm, height - 15 * mm, order.event)
        pdf.setFont("Helvetica", 10)
        pdf.drawString(10 * mm, height - 22 * mm, order.starts_at.strftime("%A %d %B %Y, %H:%M %Z"))
        pdf.drawString(10 * mm, height - 29 * mm, f"Seat {label}  ·  order {order.order_id}  ·  {order.buyer_email}")
        barcode = code128.Code128(value, barHeight=18 * mm, barWidth=0.9)
        barcode.drawOn(pdf, 10 * mm, 20 * mm)
        pdf.setFont("Helvetica", 8)
        pdf.drawString(10 * mm, 15 * mm, value)
        pdf.showPage()
    pdf.save()
    return out.getvalue()
