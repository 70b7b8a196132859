"""Inventory changes as changes: renames, pool, BMC and other record changes, keyed by serial.

On main before migrations; a store made then is stamped with this revision.
Revision 0004, after 0003; created 2026-12-01.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('racklife_node_changes',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('node', sa.String(length=63), nullable=False),
    sa.Column('serial', sa.String(length=64), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('old', sa.Text(), nullable=True),
    sa.Column('new', sa.Text(), nullable=True),
    sa.Column('actor', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('racklife_node_changes', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_racklife_node_changes_node'), ['node'], unique=False)
        batch_op.create_index(batch_op.f('ix_racklife_node_changes_serial'), ['serial'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('racklife_node_changes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_racklife_node_changes_serial'))
        batch_op.drop_index(batch_op.f('ix_racklife_node_changes_node'))
    op.drop_table('racklife_node_changes')
