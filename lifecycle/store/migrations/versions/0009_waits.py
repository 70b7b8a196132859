"""What each run's step waits on per node (``racklife_waits``), for live progress in every front end.

Revision 0009, after 0008; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('racklife_waits',
    sa.Column('run_id', sa.String(length=128), nullable=False),
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('phase', sa.String(length=32), nullable=False),
    sa.Column('waiting_on', sa.Text(), nullable=False),
    sa.Column('since', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('run_id', 'node')
    )


def downgrade() -> None:
    op.drop_table('racklife_waits')
