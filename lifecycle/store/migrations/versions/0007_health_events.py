"""GPU health events (Xids read from nodes' kernel logs) and what became of each: the automatic repair path.

Revision 0007, after 0006; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'racklife_health_events',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('node', sa.String(length=63), nullable=False),
        sa.Column('source', sa.String(length=32), nullable=False),
        sa.Column('xid', sa.Integer(), nullable=False),
        sa.Column('pci', sa.String(length=32), nullable=False),
        sa.Column('logged_at', sa.String(length=64), nullable=False),
        sa.Column('message', sa.Text(), nullable=False),
        sa.Column('bucket', sa.String(length=64), nullable=False),
        sa.Column('action', sa.String(length=16), nullable=False),
        sa.Column('outcome', sa.String(length=16), nullable=False),
        sa.Column('detail', sa.Text(), nullable=False),
        sa.Column('run_id', sa.String(length=128), nullable=True),
        sa.Column('seen_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['node'], ['racklife_nodes.name'], ),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('node', 'source', 'xid', 'pci', 'logged_at', name='uq_racklife_health_events_line'),
    )
    with op.batch_alter_table('racklife_health_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_health_events_node'), ['node'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('racklife_health_events', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_health_events_node'))
    op.drop_table('racklife_health_events')
